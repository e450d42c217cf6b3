"""What `cmake --install` and the .deb put on a machine (issue 16, item 1).

The package is the one tools/package.sh built (DDO_DEB names it; tools/run-tests.sh builds it
and sets it, so the test command always runs these): unpacked with ``dpkg-deb -x`` into a
throwaway root, it has both programs (stripped, and they run), the system and user units
pointing at /usr/bin/ddod and /etc/ddo/ddod.conf, the configuration as a conffile, bash
completion, manual pages, the docs and the Python client that Debian's python3 imports; its
control file declares the libraries and Python packages it needs and the maintainer scripts
that create the ``ddo`` user and enable the service. tests/security/test_deb_install.py
installs it for real.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from support import SOURCE_ROOT

REPO = os.path.dirname(os.path.dirname(SOURCE_ROOT))
COMPLETION = os.path.join(REPO, "deploy", "completion", "ddoctl.bash")
DEB = os.environ.get("DDO_DEB", "")

needs_deb = pytest.mark.skipif(not DEB, reason="DDO_DEB is not set (tools/run-tests.sh builds "
                                                "the package with tools/package.sh and sets it)")


def _ddoctl_commands(ddoctl: str) -> set:
    usage = subprocess.run([ddoctl, "--help"], capture_output=True, text=True, timeout=30).stdout
    section = usage.split("commands:", 1)[1].split("options:", 1)[0]
    return {match.group(1) for match in re.finditer(r"^  ([a-z]+)\b", section, re.M)}


def test_the_completion_offers_every_command_and_option(ddoctl_binary):
    with open(COMPLETION) as file:
        script = file.read()
    commands = set(re.search(r'local commands="([^"]+)"', script).group(1).split())
    assert commands == _ddoctl_commands(ddoctl_binary)
    usage = subprocess.run([ddoctl_binary, "--help"], capture_output=True, text=True).stdout
    options = set(re.search(r'local options="([^"]+)"', script).group(1).split())
    assert options == set(re.findall(r"^  (?:-\w, )?(--[a-z]+)", usage, re.M)), options
    # bash accepts it, and it completes a prefix.
    done = subprocess.run(
        ["bash", "-c", f"source {COMPLETION}; COMP_WORDS=(ddoctl st); COMP_CWORD=1; _ddoctl; "
                       f"echo ${{COMPREPLY[@]}}"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["status", "stats"], done.stdout


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("deb-root"))
    subprocess.run(["dpkg-deb", "-x", DEB, root], check=True, timeout=120)
    return root


def _control(field: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", DEB, field], capture_output=True, text=True,
                          check=True).stdout.strip()


@needs_deb
def test_the_package_is_named_and_declares_what_it_needs():
    assert os.path.basename(DEB) == f"ddo_{_control('Version')}_amd64.deb"
    depends = _control("Depends")
    for needed in ("adduser", "init-system-helpers", "python3-grpcio", "python3-protobuf",
                   "python3-xxhash", "python3-tqdm", "libgrpc++", "libsystemd0", "libre2"):
        assert needed in depends, (needed, depends)
    assert "python3-torch" in _control("Recommends")
    scripts = subprocess.run(["dpkg-deb", "--ctrl-tarfile", DEB], capture_output=True,
                             check=True).stdout
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(scripts)) as control:
        names = {os.path.basename(member.name) for member in control.getmembers()}
        assert {"postinst", "prerm", "postrm", "conffiles"} <= names, names
        postinst = control.extractfile("./postinst").read().decode()
        conffiles = control.extractfile("./conffiles").read().decode().split()
    assert "adduser --system" in postinst and "deb-systemd-helper enable ddod.service" in postinst
    assert conffiles == ["/etc/ddo/ddod.conf"]


@needs_deb
def test_the_package_holds_what_a_machine_needs(unpacked):
    def path(relative: str) -> str:
        return os.path.join(unpacked, relative)

    for program in ("ddod", "ddoctl"):
        binary = path(f"usr/bin/{program}")
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and done.stdout.startswith(f"{program} "), done
        sections = subprocess.run(["readelf", "-S", binary], capture_output=True,
                                  text=True).stdout
        assert ".debug_info" not in sections, f"{program} is not stripped"
    with open(path("usr/lib/systemd/system/ddod.service")) as unit:
        system_unit = unit.read()
    assert re.search(r"^ExecStart=/usr/bin/ddod .*--config /etc/ddo/ddod\.conf$", system_unit,
                     re.M), system_unit
    assert "Type=notify" in system_unit and "User=ddo" in system_unit
    with open(path("usr/lib/systemd/user/ddod.service")) as unit:
        assert "ExecStart=/usr/bin/ddod " in unit.read()
    with open(path("usr/lib/systemd/system/ddod.socket")) as unit:
        assert "ListenStream=/run/ddo/ddod.sock\n" in unit.read()
    with open(path("usr/lib/systemd/user/ddod.socket")) as unit:
        assert "ListenStream=%t/ddo/ddod.sock\n" in unit.read()
    assert os.path.isfile(path("etc/ddo/ddod.conf"))
    assert os.path.isfile(path("usr/share/bash-completion/completions/ddoctl"))
    for page in ("ddod.1", "ddoctl.1"):
        with open(path(f"usr/share/man/man1/{page}")) as manual:
            assert ".TH " in manual.read()
    for doc in ("README.md", "deploy.md", "configuration.md", "copyright",
                "images/lora-switch.png"):
        assert os.path.isfile(path(f"usr/share/doc/ddo/{doc}")), doc
    # Debian's python3 imports the client from where the package puts it.
    site = path("usr/lib/python3/dist-packages")
    done = subprocess.run(
        ["/usr/bin/python3", "-c", "import diffusers_dynamic_offloader as d; print(d.__file__)"],
        capture_output=True, text=True, timeout=120, cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": site, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(site), done.stdout
    assert not [name for name in os.listdir(os.path.join(site, "diffusers_dynamic_offloader"))
                if name == "__pycache__"]
    # The installed client finds the C++ consumer's sources in the package itself.
    done = subprocess.run(
        ["/usr/bin/python3", "-c",
         "from diffusers_dynamic_offloader import cpp_consumer as c; print(c.source_root())"],
        capture_output=True, text=True, timeout=120, cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": site, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.path.realpath(
        os.path.join(site, "diffusers_dynamic_offloader", "_cpp_src"))

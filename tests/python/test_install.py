"""What `cmake --install` and the Debian packages put on a machine (issue 16 item 1, issue 30
item 6).

The packages are the ones tools/package.sh built with debhelper (DDO_DEB_DIR holds exactly them;
tools/run-tests.sh builds them and sets it, so the test command always runs these): the daemon,
the two client libraries, their -dev files and the Python module, each in its own package, and
lintian finds no error and no warning in any of them. Unpacked with ``dpkg-deb -x`` into one
throwaway root, they hold both programs (stripped, and they run), the system and user units
pointing at /usr/bin/ddod and /etc/ddo/ddod.conf, the configuration as a conffile, bash
completion, compressed manual pages, the docs, the libraries with their sonames, shlibs and
ldconfig triggers, the CMake package, and the Python client that Debian's python3 imports; the
control data declare what each needs and the maintainer scripts create the ``ddo`` user and
enable the service. tests/security/test_deb_install.py installs them for real.
"""

from __future__ import annotations

import glob
import io
import os
import re
import subprocess
import tarfile

import pytest

from support import SOURCE_ROOT

REPO = os.path.dirname(os.path.dirname(SOURCE_ROOT))
COMPLETION = os.path.join(REPO, "deploy", "completion", "ddoctl.bash")
DEB_DIR = os.environ.get("DDO_DEB_DIR", "")
PACKAGES = ("ddod", "libddo-client-rpc0", "libddo-client0", "libddo-client-dev",
            "python3-diffusers-dynamic-offloader")

needs_debs = pytest.mark.skipif(not DEB_DIR, reason="DDO_DEB_DIR is not set (tools/run-tests.sh "
                                                    "builds the packages with tools/package.sh "
                                                    "and sets it)")


def _debs() -> dict:
    """The packages in DDO_DEB_DIR by name."""
    paths = sorted(glob.glob(os.path.join(DEB_DIR, "*.deb")))
    return {os.path.basename(path).split("_", 1)[0]: path for path in paths}


def _field(package: str, field: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", _debs()[package], field], capture_output=True,
                          text=True, check=True).stdout.strip()


def _control_files(package: str) -> dict:
    """The package's control members (postinst, shlibs, triggers, ...) by name, as text."""
    data = subprocess.run(["dpkg-deb", "--ctrl-tarfile", _debs()[package]], capture_output=True,
                          check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as control:
        return {os.path.basename(member.name): control.extractfile(member).read().decode()
                for member in control.getmembers() if member.isfile()}


def _contents(package: str) -> list:
    """The paths the package installs (files and links), without the leading '.'."""
    listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", _debs()[package]],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(listing)) as tree:
        return [member.name[1:] for member in tree.getmembers() if not member.isdir()]

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
    for path in _debs().values():
        subprocess.run(["dpkg-deb", "-x", path, root], check=True, timeout=120)
    return root


@needs_debs
def test_each_part_is_its_own_package_of_one_version():
    debs = _debs()
    assert sorted(debs) == sorted(PACKAGES), sorted(debs)
    version = _field("ddod", "Version")
    for package, path in debs.items():
        assert os.path.basename(path) == f"{package}_{version}_amd64.deb", path
        assert _field(package, "Version") == version
        maintainer = _field(package, "Maintainer")
        assert re.fullmatch(r"[^<>]+ <[^@<>]+@[^@<>]+\.[a-z]+>", maintainer), maintainer
        assert "localhost" not in maintainer
    files = {package: _contents(package) for package in PACKAGES}
    assert {"/usr/bin/ddod", "/usr/bin/ddoctl"} <= set(files["ddod"])
    for package in PACKAGES:
        if package != "ddod":
            assert not [name for name in files[package] if name.startswith("/usr/bin/")], package
    assert not [name for name in files["ddod"] if re.search(r"\.so(\.|$)", name)], files["ddod"]
    assert [name for name in files["python3-diffusers-dynamic-offloader"]
            if name == "/usr/lib/python3/dist-packages/diffusers_dynamic_offloader/__init__.py"]
    assert "/usr/lib/python3/dist-packages/diffusers_dynamic_offloader/kernels/byte_cast.ptx" \
        in files["python3-diffusers-dynamic-offloader"], "the fp8 cast kernel is missing"
    assert [name for name in files["libddo-client-dev"] if name.endswith("/ddo/rpc.h")]


@needs_debs
def test_the_packages_declare_what_they_need():
    depends = _field("ddod", "Depends")
    for needed in ("adduser", "libgrpc++", "libsystemd0", "libre2"):
        assert needed in depends, (needed, depends)
    # An essential package (init-system-helpers among them) is named with a version, or not at
    # all: every system has it.
    essential = ("init-system-helpers", "dpkg", "libc-bin", "bash", "coreutils")
    for package in PACKAGES:
        for relation in filter(str.strip, _field(package, "Depends").split(",")):
            assert relation.split()[0] not in essential or "(>=" in relation, (package, relation)
    python = "python3-diffusers-dynamic-offloader"
    for needed in ("python3-grpcio", "python3-protobuf", "python3-xxhash", "python3-tqdm",
                   "python3:any"):
        assert needed in _field(python, "Depends"), (needed, _field(python, "Depends"))
    assert {"python3-torch", "ddod"} <= {word.strip().split()[0]
                                         for word in _field(python, "Recommends").split(",")}
    version = _field("ddod", "Version")
    dev = _field("libddo-client-dev", "Depends")
    for library in ("libddo-client-rpc0", "libddo-client0"):
        assert f"{library} (= {version})" in dev, dev
    assert "libddo-client-rpc0" in _field("libddo-client0", "Depends")


@needs_debs
def test_each_library_has_its_soname_shlibs_and_ldconfig_trigger(unpacked):
    for package, library in (("libddo-client-rpc0", "libddo_client_rpc"),
                             ("libddo-client0", "libddo_client")):
        control = _control_files(package)
        assert re.search(rf"^{library} 0 {package} \(>= ", control.get("shlibs", ""), re.M), control
        assert "activate-noawait ldconfig" in control.get("triggers", ""), control
        (path,) = [name for name in _contents(package) if name.endswith(f"{library}.so.0")]
        dynamic = subprocess.run(["readelf", "-d", os.path.join(unpacked, path.lstrip("/"))],
                                 capture_output=True, text=True, check=True).stdout
        assert f"Library soname: [{library}.so.0]" in dynamic, dynamic
        # The unversioned link for the linker is the -dev package's.
        assert not [name for name in _contents(package) if name.endswith(".so")], package
        assert [name for name in _contents("libddo-client-dev") if name.endswith(f"/{library}.so")]
    assert [name for name in _contents("libddo-client-dev")
            if name.endswith("/cmake/ddo_client/ddo_clientConfig.cmake")]


@needs_debs
def test_the_daemon_package_creates_the_user_and_enables_the_service():
    control = _control_files("ddod")
    assert {"postinst", "prerm", "postrm", "conffiles"} <= set(control), sorted(control)
    assert "adduser --system" in control["postinst"]
    assert re.search(r"deb-systemd-helper enable '?ddod\.service'?", control["postinst"])
    # The prerm stops the socket before the service (test_deb_install.py checks that the
    # socket is installed, not enabled).
    assert "deb-systemd-invoke stop ddod.socket ddod.service" in control["prerm"]
    assert "rm -rf /var/lib/ddo /run/ddo" in control["postrm"]
    assert control["conffiles"].split() == ["/etc/ddo/ddod.conf"]


@needs_debs
def test_lintian_finds_nothing_to_fix():
    """Every package passes lintian (Debian 12's) with no error and no warning."""
    done = subprocess.run(["lintian", "--fail-on", "error,warning", "--no-tag-display-limit",
                           *_debs().values()], capture_output=True, text=True, timeout=900)
    problems = [line for line in done.stdout.splitlines() if re.match(r"^[EW]: ", line)]
    assert done.returncode == 0 and not problems, done.stdout + done.stderr


@needs_debs
def test_the_packages_hold_what_a_machine_needs(unpacked):
    def path(relative: str) -> str:
        return os.path.join(unpacked, relative)

    for program in ("ddod", "ddoctl"):
        binary = path(f"usr/bin/{program}")
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and done.stdout.startswith(f"{program} "), done
        sections = subprocess.run(["readelf", "-S", binary], capture_output=True,
                                  text=True).stdout
        assert ".debug_info" not in sections, f"{program} is not stripped"
    with open(path("lib/systemd/system/ddod.service")) as unit:
        system_unit = unit.read()
    assert re.search(r"^ExecStart=/usr/bin/ddod .*--config /etc/ddo/ddod\.conf$", system_unit,
                     re.M), system_unit
    assert "Type=notify" in system_unit and "User=ddo" in system_unit
    documentation = re.search(r"^Documentation=file://(\S+)$", system_unit, re.M).group(1)
    assert os.path.isfile(path(documentation.lstrip("/"))), documentation
    with open(path("usr/lib/systemd/user/ddod.service")) as unit:
        assert "ExecStart=/usr/bin/ddod " in unit.read()
    with open(path("lib/systemd/system/ddod.socket")) as unit:
        assert "ListenStream=/run/ddo/ddod.sock\n" in unit.read()
    with open(path("usr/lib/systemd/user/ddod.socket")) as unit:
        assert "ListenStream=%t/ddo/ddod.sock\n" in unit.read()
    assert os.path.isfile(path("etc/ddo/ddod.conf"))
    assert os.path.isfile(path("usr/share/bash-completion/completions/ddoctl"))
    for page in ("ddod.1.gz", "ddoctl.1.gz"):
        done = subprocess.run(["gzip", "-dc", path(f"usr/share/man/man1/{page}")],
                              capture_output=True, text=True, check=True)
        assert ".TH " in done.stdout, page
    for doc in ("README.md", "deploy.md", "configuration.md", "images/lora-switch.png"):
        assert os.path.isfile(path(f"usr/share/doc/ddod/{doc}")), doc
    # Each package: a changelog, and a copyright that points at Debian's copy of the license.
    for package in PACKAGES:
        doc = path(f"usr/share/doc/{package}")
        assert os.path.isfile(os.path.join(doc, "changelog.gz")), sorted(os.listdir(doc))
        with open(os.path.join(doc, "copyright")) as file:
            copyright_text = file.read()
        assert "/usr/share/common-licenses/Apache-2.0" in copyright_text
        assert "TERMS AND CONDITIONS FOR USE" not in copyright_text, "the full license text"
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
    assert os.path.isfile(os.path.join(site, "diffusers_dynamic_offloader", "kernels",
                                       "byte_cast.ptx")), "the fp8 cast kernel is missing"
    # The installed client finds the C++ consumer's sources in the package itself.
    done = subprocess.run(
        ["/usr/bin/python3", "-c",
         "from diffusers_dynamic_offloader import cpp_consumer as c; print(c.source_root())"],
        capture_output=True, text=True, timeout=120, cwd="/",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": site, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.path.realpath(
        os.path.join(site, "diffusers_dynamic_offloader", "_cpp_src"))

"""Human-readable text for what ddod reports about itself (``DaemonInfo``)."""

from __future__ import annotations

from typing import List

from ._proto import info_pb2

_GIB = float(1 << 30)


def format_daemon_info(info: info_pb2.DaemonInfo) -> str:
    """Several lines describing ``info``, for people (demo, diagnostics)."""
    platform = info.platform
    lines = [
        f"ddod {info.version or '?'} (protocol {info.api_version or '?'}), pid {info.pid}, "
        f"up {info.uptime_seconds:.1f} s",
        f"backend:   {_enum_label(info_pb2.Backend, info.backend, 'BACKEND_')}"
        + (f" ({info.backend_detail})" if info.backend_detail else ""),
        f"preset:    {_preset(info)}",
        f"platform:  {_OS_NAMES.get(platform.os, 'unknown OS')} "
        f"{platform.os_release}, host {platform.hostname or '?'}, {platform.cpu_count} CPUs",
        f"RAM:       {_gib(platform.ram_total_bytes)} total, "
        f"{_gib(platform.ram_available_bytes)} available"
        + (" (overridden)" if platform.ram_available_overridden else "")
        + f", pool budget {_gib(info.ram_budget_bytes)}",
    ]
    lines.extend(_device_lines(info))
    lines.append(f"listening: {', '.join(info.listen_addresses) or '(none reported)'}")
    if info.state_dir:
        lines.append(f"state dir: {info.state_dir}")
    if info.embedded:
        lines.append(f"embedded:  yes (private to pid {info.parent_pid})")
    else:
        lines.append("embedded:  no")
    return "\n".join(lines)


def _device_lines(info: info_pb2.DaemonInfo) -> List[str]:
    if not info.devices:
        return ["devices:   none"]
    lines = ["devices:"]
    for device in info.devices:
        line = (
            f"  [{device.ordinal}] {device.name or '?'} {device.uuid}: "
            f"{_gib(device.total_bytes)} total, {_gib(device.free_bytes)} free, "
            f"budget {_gib(device.vram_budget_bytes)}"
        )
        if device.compute_capability:
            line += f", compute {device.compute_capability}"
        if device.h2d_gbps > 0:
            line += f", H2D {device.h2d_gbps:.1f} GB/s"
        lines.append(line)
    return lines


def _gib(num_bytes: int) -> str:
    return f"{num_bytes / _GIB:.1f} GiB"


def _enum_label(enum_type, value: int, prefix: str) -> str:
    """``"HOST"`` for ``BACKEND_HOST``; the number for values this client does not know."""
    try:
        return enum_type.Name(value).removeprefix(prefix)
    except ValueError:
        return str(value)


_OS_NAMES = {
    info_pb2.OS_KIND_LINUX: "Linux",
    info_pb2.OS_KIND_WSL: "WSL",
    info_pb2.OS_KIND_WINDOWS: "Windows",
}


def _preset(info: info_pb2.DaemonInfo) -> str:
    """``auto -> one_shot_fast``, or the name alone when nothing was resolved."""
    requested = info.requested_preset or "(none)"
    effective = info.effective_preset or "(none)"
    return effective if requested == effective else f"{requested} -> {effective}"

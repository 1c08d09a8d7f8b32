"""GPUs through NVML (nvidia-ml-py's `pynvml`), when a driver is there.

Without the package or the driver (`nvmlInit` raises NVMLError_LibraryNotFound,
NVMLError_DriverNotLoaded, ...) the reader reports no GPUs and the agent falls back to the
PCI bus (sysfs), which gives bus ids and NUMA nodes but no memory figures. A failed
initialisation is retried at most every `retry_s` seconds (a driver may be loaded later).
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from gateway.inventory.messages import GpuInfo
from node_agent.sysfs import normalise_bus_id

__all__ = ["NvmlReader"]

log = logging.getLogger("caldera.agent.nvml")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Reads GPUs from NVML; `lib` is the pynvml module (imported when not given)."""

    def __init__(self, lib: Any | None = None, retry_s: float = 300.0) -> None:
        self._lib = lib
        self._ready = False
        self._last_try = float("-inf")
        self._retry_s = retry_s
        self.error = ""

    def _init(self) -> bool:
        if self._ready:
            return True
        now = time.monotonic()
        if now - self._last_try < self._retry_s:
            return False
        self._last_try = now
        try:
            if self._lib is None:
                self._lib = importlib.import_module("pynvml")
            self._lib.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError_*, ImportError, OSError alike
            message = f"{type(exc).__name__}: {exc}"
            if message != self.error:
                log.info("NVML unavailable (%s); GPUs from the PCI bus only", message)
            self.error = message
            return False
        self._ready = True
        self.error = ""
        return True

    @property
    def available(self) -> bool:
        """Whether NVML is initialised (tries to initialise it)."""
        return self._init()

    def gpus(self) -> tuple[GpuInfo, ...]:
        """Every GPU NVML sees, memory in bytes; () without NVML."""
        if not self._init():
            return ()
        nv = self._lib
        assert nv is not None
        out: list[GpuInfo] = []
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                pci = nv.nvmlDeviceGetPciInfo(h)
                numa = -1
                getter = getattr(nv, "nvmlDeviceGetNumaNodeId", None)
                if getter is not None:
                    try:
                        numa = int(getter(h))
                    except Exception:  # noqa: BLE001 - not supported on every GPU/driver
                        numa = -1
                out.append(
                    GpuInfo(
                        index=i,
                        uuid=_text(nv.nvmlDeviceGetUUID(h)),
                        model=_text(nv.nvmlDeviceGetName(h)),
                        memory_total=int(mem.total),
                        memory_used=int(mem.used),
                        memory_free=int(mem.free),
                        pci_bus_id=normalise_bus_id(_text(pci.busId)),
                        numa_node=numa,
                        source="nvml",
                    )
                )
        except Exception as exc:  # noqa: BLE001 - a GPU fell off the bus, driver reloaded...
            log.warning("NVML query failed: %s", exc)
            self.close()
            return ()
        return tuple(out)

    def memory_used(self) -> tuple[tuple[int, int], ...]:
        """(index, bytes used) per GPU; () without NVML."""
        if not self._ready:
            return ()
        nv = self._lib
        assert nv is not None
        try:
            return tuple(
                (i, int(nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i)).used))
                for i in range(nv.nvmlDeviceGetCount())
            )
        except Exception as exc:  # noqa: BLE001
            log.warning("NVML memory query failed: %s", exc)
            return ()

    def close(self) -> None:
        """Shut NVML down (it is initialised again on the next query)."""
        if self._ready and self._lib is not None:
            try:
                self._lib.nvmlShutdown()
            except Exception:
                log.debug("nvmlShutdown failed", exc_info=True)
        self._ready = False

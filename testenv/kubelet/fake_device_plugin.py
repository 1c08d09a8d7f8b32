"""A fake Kubernetes device plugin for the test kubelets: fake GPUs and RDMA HCAs.

Serves the kubelet's device plugin API (v1beta1) for `nvidia.com/gpu` and `rdma/hca` on one
node: registers both resources with the kubelet (`<root-dir>/device-plugins/kubelet.sock`),
reports every device Healthy, and on Allocate hands the container the fake character devices
that up.sh made with mknod (major 195 `/dev/nvidiaN` as the Slurm test nodes have, major 231
`/dev/infiniband/uverbsN`), plus CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES for GPUs.
Registers again whenever the kubelet restarts (its socket changes).

The few protobuf messages are encoded and decoded by hand (grpcio's generic handlers, no
generated code): test environment only, not product code.

usage: fake_device_plugin.py --plugin-dir DIR --dev-dir DIR [--gpus N] [--hcas N]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]

API_VERSION = "v1beta1"
Field = tuple[int, int | bytes]

# --- protobuf wire format (varints and length-delimited fields are all we need) -------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _str_field(num: int, text: str) -> bytes:
    return _len_field(num, text.encode())


def _fields(data: bytes) -> Iterator[Field]:
    """(field number, value) of a message: ints for varints, bytes for length-delimited."""
    i = 0

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            yield num, varint()
        elif wire == 2:
            size = varint()
            yield num, data[i : i + size]
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


# --- the plugin ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    id: str
    host_path: str
    container_path: str


@dataclass(frozen=True)
class Resource:
    name: str  # nvidia.com/gpu
    socket: str  # file name in the plugin directory
    devices: tuple[Device, ...]
    gpu: bool


def allocate_response(resource: Resource, request: bytes) -> bytes:
    """AllocateResponse for an AllocateRequest: one ContainerAllocateResponse per container."""
    by_id = {d.id: d for d in resource.devices}
    out = b""
    for num, creq in _fields(request):
        if num != 1 or not isinstance(creq, bytes):
            continue
        ids = [v.decode() for n, v in _fields(creq) if n == 1 and isinstance(v, bytes)]
        resp = b""
        if resource.gpu:
            envs = {
                "NVIDIA_VISIBLE_DEVICES": ",".join(ids),
                # the container sees only its own GPUs: CUDA ordinals 0..n-1
                "CUDA_VISIBLE_DEVICES": ",".join(str(k) for k in range(len(ids))),
            }
            for key, value in envs.items():
                resp += _len_field(1, _str_field(1, key) + _str_field(2, value))
        for dev_id in ids:
            dev = by_id[dev_id]
            spec = _str_field(1, dev.container_path) + _str_field(2, dev.host_path)
            resp += _len_field(3, spec + _str_field(3, "rw"))
        out += _len_field(1, resp)
    return out


def list_response(resource: Resource) -> bytes:
    return b"".join(
        _len_field(1, _str_field(1, d.id) + _str_field(2, "Healthy")) for d in resource.devices
    )


def _identity(data: bytes) -> bytes:
    return data


def _handler(resource: Resource, stop: threading.Event) -> Any:
    def options(_req: bytes, _ctx: Any) -> bytes:
        return b""  # DevicePluginOptions: no PreStartContainer, no preferred allocation

    def list_and_watch(_req: bytes, ctx: Any) -> Iterator[bytes]:
        yield list_response(resource)
        while not stop.is_set() and ctx.is_active():
            stop.wait(1.0)

    def allocate(req: bytes, _ctx: Any) -> bytes:
        return allocate_response(resource, req)

    def empty(_req: bytes, _ctx: Any) -> bytes:
        return b""

    unary: Callable[..., Any] = grpc.unary_unary_rpc_method_handler
    methods = {
        "GetDevicePluginOptions": unary(options, _identity, _identity),
        "ListAndWatch": grpc.unary_stream_rpc_method_handler(list_and_watch, _identity, _identity),
        "Allocate": unary(allocate, _identity, _identity),
        "GetPreferredAllocation": unary(empty, _identity, _identity),
        "PreStartContainer": unary(empty, _identity, _identity),
    }
    return grpc.method_handlers_generic_handler(f"{API_VERSION}.DevicePlugin", methods)


def register(plugin_dir: Path, resource: Resource) -> None:
    request = (
        _str_field(1, API_VERSION) + _str_field(2, resource.socket) + _str_field(3, resource.name)
    )
    with grpc.insecure_channel(f"unix://{plugin_dir / 'kubelet.sock'}") as channel:
        call = channel.unary_unary(
            f"/{API_VERSION}.Registration/Register",
            request_serializer=_identity,
            response_deserializer=_identity,
        )
        call(request, timeout=10)


def _start_servers(plugin_dir: Path, resources: list[Resource], stop: threading.Event) -> list[Any]:
    servers = []
    for res in resources:
        sock = plugin_dir / res.socket
        sock.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((_handler(res, stop),))
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        servers.append(server)
    return servers


def serve(plugin_dir: Path, resources: list[Resource]) -> None:
    """Serve and register until SIGTERM; a kubelet that restarts deletes our sockets and
    makes a new kubelet.sock: serve on new sockets and register again."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    servers: list[Any] = []
    registered_with: int | None = None
    while not stop.is_set():
        if not servers or not all((plugin_dir / r.socket).exists() for r in resources):
            for server in servers:
                server.stop(grace=0)
            servers = _start_servers(plugin_dir, resources, stop)
            registered_with = None
        try:
            inode: int | None = (plugin_dir / "kubelet.sock").stat().st_ino
        except FileNotFoundError:
            inode = None
        if inode is not None and inode != registered_with:
            try:
                for res in resources:
                    register(plugin_dir, res)
                registered_with = inode
                print(f"registered {[r.name for r in resources]}", flush=True)
            except grpc.RpcError as exc:
                print(f"register failed: {exc}", file=sys.stderr, flush=True)
        stop.wait(1.0)
    for server in servers:
        server.stop(grace=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plugin-dir", type=Path, required=True, help="<kubelet root>/device-plugins")
    ap.add_argument("--dev-dir", type=Path, required=True, help="where the fake devices are")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--hcas", type=int, default=2)
    args = ap.parse_args(argv)
    resources = [
        Resource(
            "nvidia.com/gpu",
            "caldera-fake-gpu.sock",
            tuple(
                Device(f"gpu-{i}", str(args.dev_dir / f"nvidia{i}"), f"/dev/nvidia{i}")
                for i in range(args.gpus)
            ),
            gpu=True,
        ),
        Resource(
            "rdma/hca",
            "caldera-fake-hca.sock",
            tuple(
                Device(
                    f"hca-{i}",
                    str(args.dev_dir / f"uverbs{i}"),
                    f"/dev/infiniband/uverbs{i}",
                )
                for i in range(args.hcas)
            ),
            gpu=False,
        ),
    ]
    os.umask(0o077)
    while not (args.plugin_dir / "kubelet.sock").exists():
        time.sleep(0.5)
    serve(args.plugin_dir, [r for r in resources if r.devices])
    return 0


if __name__ == "__main__":
    sys.exit(main())

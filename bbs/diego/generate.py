"""Regenerates bbs/diego/pb/diego_pb2.py and its stub diego_pb2.pyi from proto/diego.proto (both committed,
so that installing Vendue needs neither protoc nor grpcio-tools): `python -m bbs.diego.generate`, with
grpcio-tools and mypy-protobuf installed."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    from grpc_tools import protoc  # type: ignore[import-untyped, import-not-found, unused-ignore]

    args = ["protoc", f"-I{HERE / 'proto'}", f"--python_out={HERE / 'pb'}", f"--mypy_out={HERE / 'pb'}",
            str(HERE / "proto" / "diego.proto")]
    return int(protoc.main(args))


if __name__ == "__main__":
    sys.exit(main())

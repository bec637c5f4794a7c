"""Regenerates the Python modules of every `.proto` under `protos/`, in place.

    python -m protos.generate          # rewrite the generated files
    python -m protos.generate --check  # exit 1 and list what is stale; write nothing

Protos are compiled from the repository root (`-I .`), so `protos/tts/v1/tts.proto` becomes the
importable module `protos.tts.v1.tts_pb2` (plus `.pyi`, and `_pb2_grpc` for files that declare a
service). The output depends on the grpcio-tools version: pyproject.toml pins it so that
`--check` (and tests/test_protos.py) compare like with like.
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
_SERVICE_RE = re.compile(r"^\s*service\s+\w+\s*\{", re.MULTILINE)


def proto_sources(root: Path = REPO_ROOT) -> list[Path]:
    """Every .proto under protos/, relative to the repository root, in a stable order."""
    return sorted(p.relative_to(root) for p in (root / "protos").rglob("*.proto"))


def declares_service(proto: Path, root: Path = REPO_ROOT) -> bool:
    # Files without a service would get a _pb2_grpc.py holding only a version check; skip those.
    text = (root / proto).read_text(encoding="utf-8")
    return _SERVICE_RE.search(text) is not None


def expected_outputs(proto: Path, root: Path = REPO_ROOT) -> list[Path]:
    stem = proto.with_suffix("")
    outputs = [Path(f"{stem}_pb2.py"), Path(f"{stem}_pb2.pyi")]
    if declares_service(proto, root):
        outputs.append(Path(f"{stem}_pb2_grpc.py"))
    return outputs


def run_protoc(root: Path, args: list[str]) -> None:
    from grpc_tools import protoc  # imported here: only generation needs grpcio-tools
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    argv = ["grpc_tools.protoc", f"-I{root}", f"-I{well_known}", *args]
    code = protoc.main(argv)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")


def generate(out_root: Path, root: Path = REPO_ROOT) -> list[Path]:
    """Compiles every proto of the repository at `root` into `out_root` (mirroring the repo
    layout); returns the relative paths of the files written."""
    sources = proto_sources(root)
    if not sources:
        raise RuntimeError(f"no .proto files under {root / 'protos'}")
    out_root.mkdir(parents=True, exist_ok=True)
    files = [str(root / p) for p in sources]
    run_protoc(root, [f"--python_out={out_root}", f"--pyi_out={out_root}", *files])
    with_services = [str(root / p) for p in sources if declares_service(p, root)]
    if with_services:
        run_protoc(root, [f"--grpc_python_out={out_root}", *with_services])
        for grpc_module in out_root.rglob("*_pb2_grpc.py"):
            grpc_module.write_text(abstract_servicers(grpc_module.read_text()))
    written = sorted(p.relative_to(out_root) for p in out_root.rglob("*") if p.is_file())
    expected = sorted(out for p in sources for out in expected_outputs(p, root))
    if written != expected:
        raise RuntimeError(f"protoc wrote {written}, expected {expected}")
    return written


_SERVICER_CLASS = re.compile(r"^class (\w+Servicer):$", re.M)
_PLACEHOLDER_ERROR = "NotImplementedError"  # what the plugin's placeholder bodies raise
_UNIMPLEMENTED_BODY = (
    "        context.set_code(grpc.StatusCode.UNIMPLEMENTED)\n"
    "        context.set_details('Method not implemented!')\n"
    f"        raise {_PLACEHOLDER_ERROR}('Method not implemented!')\n"
)


def abstract_servicers(source: str) -> str:
    """Turns grpcio-tools' servicer base classes into abstract bases.

    The plugin emits concrete classes whose methods answer UNIMPLEMENTED; every servicer of ours
    implements its whole service, so a forgotten method should fail at construction (TypeError
    naming it), not at the first call in production. Deterministic text rewrite: the staleness
    test regenerates through this same function.
    """
    if _UNIMPLEMENTED_BODY not in source:
        return source
    source = _SERVICER_CLASS.sub(r"class \1(abc.ABC):", source)
    source = re.sub(r"^    def (\w+)\(self, (request|request_iterator), context\):$",
                    r"    @abc.abstractmethod\n    def \1(self, \2, context):", source, flags=re.M)
    source = source.replace(_UNIMPLEMENTED_BODY, "")
    return source.replace("import grpc\n", "import abc\n\nimport grpc\n", 1)


def committed_generated(root: Path = REPO_ROOT) -> list[Path]:
    """Generated-looking files currently under protos/, relative to the repository root."""
    return sorted(
        p.relative_to(root)
        for p in (root / "protos").rglob("*")
        if p.is_file() and p.name.endswith(GENERATED_SUFFIXES)
    )


def missing_init_files(root: Path = REPO_ROOT) -> list[Path]:
    """Package markers the generated modules need to be importable (and packaged)."""
    dirs = {p.parent for p in proto_sources(root)}
    for d in list(dirs):
        while d != Path("protos") and d != Path("."):
            d = d.parent
            dirs.add(d)
    return sorted(d / "__init__.py" for d in dirs if not (root / d / "__init__.py").is_file())


def stale_files(root: Path = REPO_ROOT) -> list[str]:
    """Problems that make the committed generated code differ from a fresh generation."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="protos-gen-") as tmp:
        fresh_root = Path(tmp)
        fresh = generate(fresh_root, root)
        for rel in fresh:
            committed = root / rel
            if not committed.is_file():
                problems.append(f"{rel}: missing")
            elif committed.read_bytes() != (fresh_root / rel).read_bytes():
                problems.append(f"{rel}: differs from a fresh generation")
        for rel in committed_generated(root):
            if rel not in fresh:
                problems.append(f"{rel}: no longer generated by any .proto")
    problems.extend(f"{rel}: missing package marker" for rel in missing_init_files(root))
    return problems


def write_in_place(root: Path = REPO_ROOT) -> list[Path]:
    """Regenerates into protos/ and removes generated files whose .proto is gone."""
    with tempfile.TemporaryDirectory(prefix="protos-gen-") as tmp:
        fresh_root = Path(tmp)
        fresh = generate(fresh_root, root)
        for rel in committed_generated(root):
            if rel not in fresh:
                logger.info("removing orphaned %s", rel)
                (root / rel).unlink()
        for rel in fresh:
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((fresh_root / rel).read_bytes())
    for rel in missing_init_files(root):
        (root / rel).write_text("")
        logger.info("created %s", rel)
    return fresh


def installed_tools_version() -> str:
    from importlib.metadata import version

    return version("grpcio-tools")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m protos.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale generated files, write nothing")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.check:
        problems = stale_files(root)
        for problem in problems:
            print(f"stale: {problem}", file=sys.stderr)
        if problems:
            print(
                f"generated code is stale (grpcio-tools {installed_tools_version()} installed); "
                "run: python -m protos.generate",
                file=sys.stderr,
            )
            return 1
        print(f"{len(proto_sources(root))} protos: generated code is up to date")
        return 0
    written = write_in_place(root)
    print(f"wrote {len(written)} files from {len(proto_sources(root))} protos")
    return 0


if __name__ == "__main__":
    sys.exit(main())

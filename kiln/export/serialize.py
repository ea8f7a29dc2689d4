"""kiln.save(program, path) / kiln.load(path): an exported program as a file, no pickled code.

Note [Export: file format]
A zip archive (format version FORMAT_VERSION) holding, under `kiln_program/`:
  format.json    {"format": "kiln.export", "format_version", "kiln_version", "torch_version",
                  "files": {member: sha256}}: what wrote it, and a checksum per other member
  graph.py       the graph as FX code (kiln.export.fx_text: read back without running it)
  program.json   placeholders ("state" name | "input" leaf), input and output pytree specs
                 (torch.utils._pytree's JSON), input metadata (dtype, device, shape with Dim
                 names), output leaves, Dim ranges, shape guards over Dim names, and per state
                 tensor its dtype, shape, whether it is a parameter and its data member
  tensors/N.bin  each state tensor's bytes, contiguous, in the machine's byte order
  package/...    with save(..., package=True): kiln's code cache after compiling the program for
                 the export's input sizes (cpp/<key>.so and .cpp, graphs/<key>.json), and in
                 format.json the host it was built for. load() copies it into config.cache_dir,
                 so `program.compile("kiln")` at those sizes builds no C++ (same torch, compiler
                 and CPU: the cache keys hold them; elsewhere kiln compiles as usual)
Loading checks the format, the versions (another kiln or torch version is an error unless
`allow_version_mismatch=True`) and every checksum, so a truncated or edited file is reported
with the member at fault instead of running something else. Nothing in the file is executed.
"""

import hashlib
import io
import json
import os
import tempfile
import zipfile
from importlib.metadata import version

import torch
from torch.utils import _pytree as pytree

from kiln import config, toolchain
from kiln.exc import KilnError
from kiln.export.fx_text import FormatError, graph_module, graph_to_text
from kiln.export.program import ExportedProgram, TensorMeta

FORMAT_VERSION = 1
ROOT = "kiln_program/"


class LoadError(KilnError):
    """A file kiln.load cannot read: not a kiln program, truncated, edited, other versions."""


def kiln_version():
    try:
        return version("torch-kiln")
    except Exception:
        return "0+unknown"


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _package(program):
    """{member: bytes} of kiln's code cache after compiling the program at the export's sizes."""
    saved = config.cache_dir
    with tempfile.TemporaryDirectory(prefix="kiln-package-") as tmp:
        config.cache_dir = tmp
        try:
            args, kwargs = program.example_inputs()
            with torch.no_grad():
                program.compile("kiln")(*args, **kwargs)
        finally:
            config.cache_dir = saved
        out = {}
        for dirpath, _, files in os.walk(tmp):
            for f in sorted(files):
                if f.endswith((".so", ".cpp", ".json")):
                    full = os.path.join(dirpath, f)
                    with open(full, "rb") as fh:
                        out["package/" + os.path.relpath(full, tmp)] = fh.read()
        return out


def _unpack(data):
    """Copy a package's cache files into config.cache_dir (files already there are kept)."""
    for member, blob in data.items():
        if not member.startswith("package/"):
            continue
        dest = os.path.join(config.cache_dir, member[len("package/") :])
        if os.path.exists(dest):
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, dest)


def save(program, path, package=False):
    """Write an ExportedProgram to `path` (Note [Export: file format]); `package=True` also
    stores the compiled kernels for this host."""
    members = {}
    if package:
        members.update(_package(program))
    members["graph.py"] = graph_to_text(program.graph_module).encode()
    state_index = []
    for i, (name, t) in enumerate(program.state.items()):
        member = f"tensors/{i}.bin"
        members[member] = _tensor_bytes(t)
        state_index.append(
            dict(
                name=name,
                dtype=str(t.dtype).removeprefix("torch."),
                shape=list(t.shape),
                parameter=name in program.parameters,
                requires_grad=bool(t.requires_grad),
                data=member,
            )
        )
    for kind, value in program.outputs:
        if kind == "const":
            _json_constant(value)
    body = dict(
        placeholders=program.placeholders,
        in_spec=pytree.treespec_dumps(program.in_spec),
        in_meta=[m.__dict__ if isinstance(m, TensorMeta) else m for m in program.in_meta],
        outputs=program.outputs,
        out_spec=pytree.treespec_dumps(program.out_spec),
        dims=program.dims,
        guards=program.guards,
        state=state_index,
    )
    members["program.json"] = json.dumps(body, indent=1).encode()
    header = dict(
        format="kiln.export",
        format_version=FORMAT_VERSION,
        kiln_version=kiln_version(),
        torch_version=torch.__version__,
        package=_host() if package else None,
        files={m: hashlib.sha256(data).hexdigest() for m, data in members.items()},
    )
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(ROOT + "format.json", json.dumps(header, indent=1))
        for m, data in members.items():
            z.writestr(ROOT + m, data)
    return path


def _host():
    return dict(cpu=toolchain.cpu_id(), compiler=toolchain.compiler_id(config.cpp_compiler))


def _json_constant(value):
    try:
        json.dumps(value)
    except TypeError as e:
        raise KilnError(f"kiln.save: the output constant {value!r} cannot be stored") from e


def _read(z, member):
    try:
        return z.read(ROOT + member)
    except KeyError:
        raise LoadError(f"not a complete kiln program file: {member} is missing") from None


def load(path, allow_version_mismatch=False):
    """Read a file kiln.save wrote; returns the ExportedProgram (Note [Export: file format])."""
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise LoadError(f"{path}: not a kiln program file, or truncated ({e})") from None
    with z:
        try:
            header = json.loads(_read(z, "format.json"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise LoadError(f"{path}: format.json is not JSON ({e})") from None
        except zipfile.BadZipFile as e:
            raise LoadError(f"{path}: truncated or corrupted ({e})") from None
        if header.get("format") != "kiln.export":
            raise LoadError(f"{path}: not a kiln program file (format {header.get('format')!r})")
        if header.get("format_version") != FORMAT_VERSION:
            raise LoadError(
                f"{path}: file format version {header.get('format_version')}, this kiln reads "
                f"version {FORMAT_VERSION}"
            )
        mismatched = [
            f"{what} {header.get(key)} (this process has {have})"
            for what, key, have in (
                ("kiln", "kiln_version", kiln_version()),
                ("torch", "torch_version", torch.__version__),
            )
            if header.get(key) != have
        ]
        if mismatched and not allow_version_mismatch:
            raise LoadError(
                f"{path} was written by {' and '.join(mismatched)}; export it again with this "
                "version, or pass allow_version_mismatch=True to try anyway"
            )
        data = {}
        for member, digest in header.get("files", {}).items():
            try:
                blob = _read(z, member)
            except zipfile.BadZipFile as e:
                raise LoadError(f"{path}: {member} is corrupted ({e})") from None
            if hashlib.sha256(blob).hexdigest() != digest:
                raise LoadError(f"{path}: {member} was edited or corrupted (checksum differs)")
            data[member] = blob
    if header.get("package"):
        _unpack(data)
    for needed in ("graph.py", "program.json"):
        if needed not in data:
            raise LoadError(f"{path}: {needed} is missing")
    body = json.loads(data["program.json"])
    state, params = {}, []
    for entry in body["state"]:
        dtype = getattr(torch, entry["dtype"])
        blob = data.get(entry["data"])
        if blob is None:
            raise LoadError(f"{path}: {entry['data']} is missing")
        t = (
            torch.frombuffer(bytearray(blob), dtype=torch.uint8)
            if blob
            else torch.empty(0, dtype=torch.uint8)
        )
        t = t.view(dtype).reshape(entry["shape"])
        if entry["parameter"]:
            params.append(entry["name"])
            t = torch.nn.Parameter(t, requires_grad=entry["requires_grad"])
        state[entry["name"]] = t
    try:
        gm = graph_module(data["graph.py"].decode())
    except FormatError as e:
        raise LoadError(f"{path}: graph.py: {e}") from None
    in_meta = [TensorMeta(**m) if isinstance(m, dict) else m for m in body["in_meta"]]
    return ExportedProgram(
        gm,
        body["placeholders"],
        pytree.treespec_loads(body["in_spec"]),
        in_meta,
        body["outputs"],
        pytree.treespec_loads(body["out_spec"]),
        state,
        params,
        {k: list(v) for k, v in body["dims"].items()},
        body["guards"],
    )


def program_bytes(program):
    """The file contents kiln.save writes, as bytes (for tests and transfers)."""
    buf = io.BytesIO()
    save(program, buf)
    return buf.getvalue()

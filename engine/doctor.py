"""`infill-lsp doctor`: which model each role uses and how it loaded, and what the machine
offers each local backend.

`doctor_report` loads each role's model (a model named for several roles loads once) and returns the
report as `doctor --json` prints it: one entry per role (`ok`, and the error of one that cannot
load), then `machine`. `print_report` prints it, as JSON or as text.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from engine.accelerators import gib, llama_cpp_view, torch_view
from engine.completion import CompletionModel
from engine.errors import EngineError
from engine.hub import ProgressSink
from engine.models import ModelSet, model_spec
from engine.next_edit_model import NextEditModel
from engine.specs import ModelOptions, ModelSpec, RemoteSpec
from engine.types import Role

#: The report's key for the machine section; every other key is a role's.
MACHINE = "machine"


def doctor_report(options: ModelOptions, on_download: ProgressSink | None = None) -> dict[str, Any]:
    """Each role's model as it loaded (or why it did not), then the machine. A hub model is
    downloaded first (unless cached), its progress told to `on_download`."""
    report: dict[str, Any] = {}
    # Before the models load: a GPU's free memory is then what they found.
    machine = machine_report()
    specs: dict[Role, ModelSpec | RemoteSpec] = {}
    for role in Role:
        try:
            specs[role] = model_spec(role, options)
        except EngineError as e:
            report[role.value] = {"ok": False, "error": str(e)}
    models = ModelSet(specs, on_download=on_download)
    for role in specs:
        try:
            engine = models.engine(role)
        except EngineError as e:
            spec = specs[role]
            where = str(spec.path) if isinstance(spec, ModelSpec) else spec.endpoint
            report[role.value] = {"ok": False, "model_path": where, "error": str(e)}
            continue
        try:
            completion = CompletionModel.of(engine, options.fim_family)
        except EngineError as e:
            report[role.value] = {"ok": False, "model_path": engine.info.path, "error": str(e)}
            continue
        fim = completion.format.fim
        info = asdict(engine.info)
        report[role.value] = {
            "ok": True,
            "backend": info["backend"],
            "model_path": info["path"],
            "model_name": info["name"],
            "device": info["device"],
            "gpu": info["gpu"],
            "warnings": list(info["warnings"]),
            "context_size": info["context_size"],
            "fim_family": fim.family if fim else None,
            "chat_template": info["has_chat_template"],
            "eog_tokens": [{"id": i, "text": t} for i, t in engine.info.eog_tokens],
            "load_seconds": round(info["load_seconds"], 3),
            "shared_with_other_role": models.shares(role),
        }
        if role is Role.COMPLETION:
            report[role.value]["fim_note"] = completion.fim_note
        if role is Role.NEXT_EDIT:
            # None: no next-edit format, so next edits come from propagation alone.
            next_edit = NextEditModel.of(engine, options.next_edit_format)
            report[role.value]["next_edit_format"] = next_edit.format.family if next_edit else None
    models.close()
    report[MACHINE] = machine
    return report


def failed(report: dict[str, Any]) -> bool:
    """Whether a role's model could not load: `doctor`'s exit status is then 1."""
    # A warning (GPU layers asked of a CPU-only build, say) is no failure: the model works.
    return any(not entry["ok"] for key, entry in report.items() if key != MACHINE)


def print_report(report: dict[str, Any], *, as_json: bool) -> None:
    """`report` on stdout: indented JSON, or text with one line per fact."""
    if as_json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    for role_name, entry in report.items():
        if role_name == MACHINE:
            continue
        print(f"{role_name}:")
        for key, value in entry.items():
            if key == "fim_note" and value is None:
                continue  # a FIM model: nothing to say
            if key == "eog_tokens":
                value = ", ".join(f"{t['text']} ({t['id']})" for t in value)
            elif key == "gpu" and value is None:
                value = "none"
            elif key == "warnings":
                for warning in value:
                    print(f"  {'warning':24} {warning}")
                continue
            print(f"  {key:24} {value}")
    _print_machine(report[MACHINE])


def machine_report() -> dict[str, Any]:
    """What the machine offers each local backend: llama.cpp's build and devices, and torch's
    CUDA and GPUs (`doctor`'s "machine" section)."""
    llama, torch = llama_cpp_view(), torch_view()
    return {
        "llama_cpp": {
            "installed": llama.installed,
            "version": llama.version,
            "gpu_offload": llama.gpu_offload,
            "backends": list(llama.backends),
            "devices": [
                {
                    "name": d.name,
                    "description": d.description,
                    "kind": d.kind.value,
                    "backend": d.backend,
                    "memory_total": d.memory_total,
                    "memory_free": d.memory_free,
                }
                for d in llama.devices
            ],
            "notes": list(llama.notes),
        },
        "torch": {
            "installed": torch.installed,
            "version": torch.version,
            "cuda_version": torch.cuda_version,
            "cuda_available": torch.cuda_available,
            "devices": [
                {"index": d.index, "name": d.name, "memory_total": d.memory_total}
                for d in torch.devices
            ],
            "notes": list(torch.notes),
        },
    }


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else "yes" if value else "no"


def _print_machine(machine: dict[str, Any]) -> None:
    """The machine section of `doctor` as text: one line per fact, one per device."""
    lines: list[tuple[str, str]] = []
    llama = machine["llama_cpp"]
    if llama["installed"]:
        lines.append(
            (
                "llama.cpp",
                f"llama-cpp-python {llama['version'] or '(version unknown)'}, "
                f"GPU offload: {_yes_no(llama['gpu_offload'])}",
            )
        )
        lines.append(("llama.cpp backends", ", ".join(llama["backends"]) or "none"))
        for i, d in enumerate(llama["devices"] or [None]):
            words = (
                "none"
                if d is None
                else f"{d['name']} ({d['kind']}): {_device_words(d['description'] or d['name'], d)}"
            )
            lines.append(("llama.cpp devices" if i == 0 else "", words))
    else:
        lines.append(("llama.cpp", "not installed"))
    lines.extend(("llama.cpp note", note) for note in llama["notes"])
    torch = machine["torch"]
    if torch["installed"]:
        lines.append(
            (
                "torch",
                f"{torch['version']}, CUDA build: {torch['cuda_version'] or 'no'}, "
                f"CUDA available: {_yes_no(torch['cuda_available'])}",
            )
        )
        for i, d in enumerate(torch["devices"] or [None]):
            words = "none" if d is None else f"cuda:{d['index']}: {_device_words(d['name'], d)}"
            lines.append(("torch GPUs" if i == 0 else "", words))
    else:
        lines.append(("torch", "not installed"))
    lines.extend(("torch note", note) for note in torch["notes"])
    print("machine:")
    for key, value in lines:
        print(f"  {key:24} {value}")


def _device_words(name: str, device: dict[str, Any]) -> str:
    """A device and its memory in words: `NVIDIA H200, 139.8 GiB (120.2 GiB free)`."""
    total, free = device.get("memory_total"), device.get("memory_free")
    if total is None:
        return name
    words = f"{name}, {gib(total)}"
    return words if free is None else f"{words} ({gib(free)} free)"

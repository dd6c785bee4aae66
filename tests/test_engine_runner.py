"""The engine runner (eagle3_quant/engines/runner.py) and the engine lookup (environment.py), with trivial children:
any Python is an "engine Python" for these. One line per failure, exit 2; no process outlives a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from eagle3_quant.engines import environment
from eagle3_quant.engines.runner import ChildCommand, run_child
from eagle3_quant.errors import EngineError, EngineNotFoundError

SPAWNS = """
import json, os, subprocess, sys, time
request = json.load(open(sys.argv[1]))
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              start_new_session=request.get("escape", False))
open(request["pids"], "w").write(f"{os.getpid()} {grandchild.pid}")
if request.get("finish"):
    json.dump({"done": True}, open(sys.argv[2], "w"))
    sys.exit(0)
time.sleep(300)
"""


def child(tmp_path: Path, body: str, name: str = "child.py") -> ChildCommand:
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    return ChildCommand(sys.executable, script, name="the test engine")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() \
        else "Z"
    return state != "Z"


def pids_of(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


def test_a_result_comes_back_with_the_request_read_by_the_child(tmp_path):
    command = child(tmp_path, """
        import json, sys
        request = json.load(open(sys.argv[1]))
        json.dump({"echo": request["x"] * 2, "cwd_is_temp": "e3q-engine-" in __import__("os").getcwd()},
                  open(sys.argv[2], "w"))
        """)
    run = run_child(command, {"x": 21}, timeout_s=60)
    assert run.ok and run.error is None and run.returncode == 0
    assert run.checked() == {"echo": 42, "cwd_is_temp": True}
    assert run.seconds > 0


def test_a_crash_is_one_line_naming_the_exception(tmp_path):
    command = child(tmp_path, """
        import sys
        print("engine log noise", file=sys.stderr)
        def load():
            raise ValueError("torch.float32 is not supported for quantization method quark")
        load()
        """)
    run = run_child(command, {}, timeout_s=60)
    assert not run.ok and run.returncode == 1
    assert run.error == ("the test engine failed (exit status 1): ValueError: torch.float32 is not supported for "
                         "quantization method quark")
    with pytest.raises(EngineError) as caught:
        run.checked()
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)


def test_a_childs_own_error_wins_and_a_partial_result_survives(tmp_path):
    command = child(tmp_path, """
        import json, sys
        json.dump({"error": "static FP8 needs _C.silu_and_mul_quant", "partial": 1}, open(sys.argv[2], "w"))
        sys.exit(3)
        """)
    run = run_child(command, {}, timeout_s=60)
    assert run.error == "static FP8 needs _C.silu_and_mul_quant" and run.result["partial"] == 1


def test_killed_by_a_signal_and_no_result_are_named(tmp_path):
    killed = run_child(child(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"), {}, 60)
    assert killed.returncode == -9 and killed.error.startswith("the test engine was killed by SIGKILL (out of memory?)")
    silent = run_child(child(tmp_path, "pass\n", "silent.py"), {}, 60)
    assert silent.error == "the test engine exited without writing a result"


def test_a_missing_interpreter_is_one_line(tmp_path):
    command = ChildCommand(tmp_path / "no-python", tmp_path / "x.py", name="vLLM")
    with pytest.raises(EngineError, match="cannot start vLLM with .*no-python"):
        run_child(command, {}, timeout_s=5)


@pytest.mark.parametrize("escape", [False, True], ids=["in-group", "own-session"])
def test_a_timeout_ends_the_whole_tree(tmp_path, escape):
    pids = tmp_path / "pids"
    started = time.perf_counter()
    run = run_child(child(tmp_path, SPAWNS), {"pids": str(pids), "escape": escape}, timeout_s=3)
    assert run.returncode is None
    assert run.error == "the test engine did not finish within 3 s (its processes were ended)"
    assert time.perf_counter() - started < 30
    assert not any(alive(pid) for pid in pids_of(pids))


def test_what_a_successful_child_leaves_running_is_ended(tmp_path):
    pids = tmp_path / "pids"
    run = run_child(child(tmp_path, SPAWNS), {"pids": str(pids), "finish": True}, timeout_s=60)
    assert run.ok and run.result == {"done": True}
    assert not any(alive(pid) for pid in pids_of(pids))


def interruptible() -> None:
    """The parent as a CLI in a terminal gets Ctrl-C: under a background job (``make test &``) SIGINT arrives
    ignored, and Python keeps an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_the_tree_and_propagates(tmp_path):
    """The parent in its own process (as the CLI is): SIGINT while the engine runs -> KeyboardInterrupt out of
    run_child (exit 130 here), and the engine and its child are gone."""
    pids = tmp_path / "pids"
    script = tmp_path / "engine.py"
    script.write_text(SPAWNS)
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent(f"""
        import faulthandler, sys
        faulthandler.dump_traceback_later(100)     # a hang shows where it is
        from pathlib import Path
        from eagle3_quant.engines.runner import ChildCommand, run_child
        try:
            run_child(ChildCommand(sys.executable, Path({str(script)!r})), {{"pids": {str(pids)!r}}}, timeout_s=120)
        except KeyboardInterrupt:
            sys.exit(130)
        """))
    proc = subprocess.Popen([sys.executable, str(parent)], stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    deadline = time.monotonic() + 120
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err
    assert not any(alive(pid) for pid in pids_of(pids))


def test_lookup_order_flag_then_environment_then_the_project(tmp_path, monkeypatch):
    flag, env, own = (tmp_path / name / "bin" / "python" for name in ("flag", "env", "own"))
    for python in (flag, env, own):
        python.parent.mkdir(parents=True)
        python.symlink_to(sys.executable)
    monkeypatch.setattr(environment, "CHECKOUT", tmp_path / "own" / "..")
    monkeypatch.setattr(environment, "PROJECT_ENV", "own")
    monkeypatch.setenv(environment.ENV_VAR, str(env))
    assert environment.find_engine_python(flag).path == flag
    assert environment.find_engine_python(tmp_path / "flag").path == flag            # a venv folder works too
    assert environment.find_engine_python().origin == environment.ENV_VAR
    monkeypatch.delenv(environment.ENV_VAR)
    found = environment.find_engine_python()
    assert found.path.samefile(own) and "make setup-engine" in found.origin


def test_no_engine_environment_names_the_make_target_and_the_flag(tmp_path, monkeypatch):
    monkeypatch.setattr(environment, "CHECKOUT", tmp_path)
    monkeypatch.delenv(environment.ENV_VAR, raising=False)
    with pytest.raises(EngineNotFoundError) as caught:
        environment.find_engine_python()
    text = str(caught.value)
    assert "make setup-engine" in text and "--engine-python" in text and caught.value.exit_code == 2
    with pytest.raises(EngineNotFoundError, match="not an executable file"):
        environment.find_engine_python(tmp_path / "nothing")


def test_a_python_without_vllm_is_refused_by_the_probe(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho '{\"vllm\": null, \"torch\": null, \"device\": \"cpu (x)\", \"python\": \"3\"}' "
                    "> \"$3\"\n")
    fake.chmod(0o755)
    with pytest.raises(EngineError, match="no vLLM in the engine Python from --engine-python"):
        environment.probe_engine(environment.find_engine_python(fake))


def test_the_probe_reports_distribution_version_torch_and_device():
    """This interpreter has vLLM's own code (make setup-vllm) or not; either way the probe says what is there
    without importing it."""
    from importlib import metadata

    try:
        expected = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        pytest.skip("vLLM is not installed in this environment (make setup-vllm)")
    import torch

    info = environment.probe_engine(environment.EnginePython(Path(sys.executable), "test"))
    assert (info.distribution, info.version, info.torch) == ("vllm", expected, torch.__version__)
    assert info.device.startswith("cuda" if torch.cuda.is_available() else "cpu")
    assert json.loads(json.dumps(info.to_dict()))["version"] == expected


def test_ctrl_c_while_the_child_starts_still_ends_it(tmp_path, monkeypatch):
    """The window between fork and `Popen` returning: the signal is held until the parent knows the child."""
    import eagle3_quant.engines.runner as runner

    pids = tmp_path / "pids"
    real_popen = subprocess.Popen

    def popen_then_ctrl_c(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        deadline = time.monotonic() + 60
        while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)          # arrives before Popen has returned to run_child
        return proc

    monkeypatch.setattr(runner.subprocess, "Popen", popen_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_child(child(tmp_path, SPAWNS), {"pids": str(pids)}, timeout_s=120)
    assert not any(alive(pid) for pid in pids_of(pids))


LITTERS = """
import json, os, sys, tempfile, time
request = json.load(open(sys.argv[1]))
# what vLLM's file-based init does on every start (vllm/utils/network_utils.py): a file in the temp folder
init = os.path.join(tempfile.gettempdir(), "vllm_dist_0123abcd")
open(init, "w").write("rank 0")
open(request["seen"], "w").write(init)
if request["ending"] == "success":
    json.dump({"done": True}, open(sys.argv[2], "w"))
elif request["ending"] == "error":
    raise RuntimeError("the engine exploded")
else:
    time.sleep(300)
"""


@pytest.fixture
def system_temp(tmp_path, monkeypatch) -> Path:
    """The temp folder of this process (and, unless the runner says otherwise, of its children)."""
    import tempfile

    folder = tmp_path / "system-temp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return folder


@pytest.mark.parametrize(("ending", "timeout_s"), [("success", 60), ("error", 60), ("timeout", 3)])
def test_an_engine_run_leaves_nothing_in_the_temp_folder(tmp_path, system_temp, ending, timeout_s):
    seen = tmp_path / "seen"
    before = sorted(system_temp.iterdir())
    run = run_child(child(tmp_path, LITTERS), {"seen": str(seen), "ending": ending}, timeout_s=timeout_s)
    assert run.ok == (ending == "success") and (run.returncode is None) == (ending == "timeout")
    init = Path(seen.read_text())
    assert init.name == "vllm_dist_0123abcd" and init.parent.parent.name.startswith("e3q-engine-")
    assert sorted(system_temp.iterdir()) == before == []
    assert not init.exists()


def test_ctrl_c_leaves_nothing_in_the_temp_folder(tmp_path, system_temp):
    seen = tmp_path / "seen"
    script = tmp_path / "engine.py"
    script.write_text(LITTERS)
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from eagle3_quant.engines.runner import ChildCommand, run_child
        try:
            run_child(ChildCommand(sys.executable, Path({str(script)!r})), {{"seen": {str(seen)!r},
                      "ending": "hang"}}, timeout_s=120)
        except KeyboardInterrupt:
            sys.exit(130)
        """))
    proc = subprocess.Popen([sys.executable, str(parent)], stderr=subprocess.PIPE, text=True,
                            preexec_fn=interruptible)
    deadline = time.monotonic() + 120
    while not seen.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any(system_temp.iterdir())              # the engine's folder, while it runs
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err
    assert list(system_temp.iterdir()) == []

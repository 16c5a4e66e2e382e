"""``trainyard launch --run -- COMMAND``: the user's own command under torchrun.

The command is read as torchrun's three ways of starting a worker, and torchrun's own parser
(torch/distributed/run.py ``get_args_parser`` and ``config_from_args``, the installed torch) is the
judge of what each worker then runs. The runs are real: torchrun starts real worker processes, the
NCCL logs they leave are real NCCL logs (tests/trainer/fixtures/nccl), and the metrics are scraped
from launch's own endpoint by a worker.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trainer.conftest import FIXTURES, PYTHON, clean_env, trainyard
from trainer import command
from trainer.launch import plan
from trainyard.contract.errors import UserError

NCCL_LOGS = FIXTURES / "nccl"


def worker_argv(the_plan_argv: list[str], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each worker runs, as torchrun itself reads the command line launch gives it."""
    from torch.distributed import run

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # config_from_args sets it in os.environ otherwise
    for name in command.PROGRAM_ENV:
        monkeypatch.delenv(name, raising=False)
    start = the_plan_argv.index("torch.distributed.run") + 1
    args = run.get_args_parser().parse_args(the_plan_argv[start:])
    _, cmd, cmd_args = run.config_from_args(args)
    assert isinstance(cmd, str)
    return [cmd, *cmd_args]


@pytest.mark.parametrize(
    ("user", "worker"),
    [
        (["python", "train.py", "--epochs", "3"], [PYTHON, "-u", "train.py", "--epochs", "3"]),
        (["python3", "-m", "mypkg.train", "--lr", "1e-4"], [PYTHON, "-u", "-m", "mypkg.train", "--lr", "1e-4"]),
        ([PYTHON, "/src/train.py"], [PYTHON, "-u", "/src/train.py"]),
        (["train.py", "--nnodes", "9"], [PYTHON, "-u", "train.py", "--nnodes", "9"]),  # its flags, not torchrun's
        (["python", "-X", "dev", "train.py"], ["python", "-X", "dev", "train.py"]),  # interpreter options kept
        (["python3.10", "train.py"], ["python3.10", "train.py"]),  # another interpreter stays that one
        (["./run.sh", "--", "-m", "x"], ["./run.sh", "--", "-m", "x"]),
        (["/opt/bin/trainer-bin", "--standalone"], ["/opt/bin/trainer-bin", "--standalone"]),
        (["bash", "-c", "exec python train.py"], ["bash", "-c", "exec python train.py"]),
        (["trainyard", "train", "--max-steps", "5"], ["trainyard", "train", "--max-steps", "5"]),
    ],
)
def test_each_worker_runs_the_users_command_as_torchrun_reads_it(user, worker, monkeypatch):
    p = plan({}, run=user, python=PYTHON)
    assert worker_argv(p.argv, monkeypatch) == worker


# Words as a hostile job may write them: options, separators, quotes, shell syntax, unicode,
# lone surrogates (what Python makes of argv bytes that are not UTF-8); no NUL (refused below).
WORDS = st.one_of(
    st.sampled_from(["--", "-m", "-", "--no-python", "--nnodes", "=", "@file", "python", "$(x)", "a b", "'", ""]),
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12),
    st.text(st.characters(min_codepoint=0xDC80, max_codepoint=0xDCFF), min_size=1, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=6))
def test_any_command_is_run_exactly_or_refused_by_name(words):
    """Never a traceback; what torchrun will run is the command (python given as torchrun's own)."""
    try:
        p = command.program(words, python=PYTHON)
    except UserError as exc:
        assert str(exc).startswith("trainyard launch --run: ")
        return
    flag = p.argv[0] if p.argv[0] in ("--no-python", "-m") else None
    rest = p.argv[1:] if flag else p.argv
    assert rest[0] == command.SEPARATOR  # every later word is the program's, for torchrun's parser
    if flag == "--no-python":
        assert rest[1:] == words
    elif flag == "-m":
        assert words[1:2] == ["-m"] and rest[1:] == words[2:]
    elif words[0] in ("python", "python3", PYTHON):
        assert rest[1:] == words[1:]
    else:
        assert words[0].endswith(".py") and rest[1:] == words
    assert not rest[1].startswith("-")


@settings(max_examples=150, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=5))
def test_torchrun_parses_every_accepted_command_back_to_it(words):
    """Through torchrun's own parser: no word of the user's is taken for a torchrun option."""
    try:
        p = plan({}, run=["python", "train.py", *words], python=PYTHON)
    except UserError:
        return
    with pytest.MonkeyPatch.context() as mp:
        assert worker_argv(p.argv, mp) == [PYTHON, "-u", "train.py", *words]


@pytest.mark.parametrize(
    ("words", "message"),
    [
        ([], "no command after --"),
        ([""], "the program (the first word after --) is empty"),
        (["--epochs", "3"], "an option, not a program"),
        (["python", "train.py\x00--evil"], "contains a NUL byte"),
        (["python", "x" * (command.MAX_WORD + 1)], f"at most {command.MAX_WORD} bytes per argument"),
        (["python", "t.py", *(["y" * 100_000] * 11)], "the command is"),
        (["python"], "'python' alone names no script"),
        (["python", "-m"], "python -m takes a module name (such as mypackage.train), not nothing"),
        (["python", "-m", "pkg/train.py"], "not 'pkg/train.py'"),
        (["python", "-m", "-x"], "not '-x'"),
        (["torchrun", "--nproc-per-node", "8", "train.py"], "torchrun starts its own worker group"),
        (["/usr/local/bin/torchrun", "train.py"], "torchrun starts its own worker group"),
        (["python", "-m", "torch.distributed.run", "train.py"], "is torchrun"),
        (["python3", "-m", "torch.distributed.launch", "train.py"], "is torchrun"),
        (["trainyard", "launch", "--", "--model", "tiny"], "would run inside itself"),
        (["python", "-m", "trainer", "launch"], "would run inside itself"),
    ],
)
def test_a_command_no_worker_could_run_is_refused_naming_why(words, message):
    with pytest.raises(UserError, match=r"^trainyard launch --run: ") as exc:
        plan({}, run=words, python=PYTHON)
    assert message in str(exc.value)


def test_torchruns_program_flags_from_the_pod_env_are_removed():
    """PET_NO_PYTHON=1 in the pod would make torchrun run `-m` as an executable (check_env)."""
    env = {"PET_NO_PYTHON": "1", "PET_MODULE": "1", "PET_NNODES": "1"}
    for p in (plan(env, ["--model", "tiny"]), plan(env, run=["python", "t.py"])):
        assert p.unset == ["PET_MODULE", "PET_NO_PYTHON"]
        assert "unset PET_MODULE" in p.render()
    out = subprocess.run(
        trainyard("launch", "--dry-run", "--run", "--", "python", "t.py"),
        capture_output=True,
        text=True,
        env=clean_env(PET_NO_PYTHON="1"),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "unset PET_NO_PYTHON" in out.stdout.splitlines()
    assert out.stdout.splitlines()[-1].endswith("--max-restarts 3 -- t.py")


def test_the_run_keeps_the_rendezvous_planned_for_the_trainer():
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "23456", "PET_NNODES": "2", "PET_NODE_RANK": "1"}
    trainer = plan(env, ["--model", "tiny"], local_addr="10.0.0.2")
    own = plan(env, run=["python", "t.py"], local_addr="10.0.0.2")
    assert own.argv[: own.argv.index("--")] == trainer.argv[: trainer.argv.index("-m", 3)]
    assert own.env == trainer.env


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["launch", "--run"], "trainyard launch --run: no command; it follows --"),
        (["launch", "--run", "--"], "trainyard launch --run: no command after --"),
        (["launch", "--run", "--", "python", "a\x01b.py", "\udcff"], None),
        (["launch", "--allow-transport-fallback", "--", "--model", "tiny"], "--allow-transport-fallback is for --run"),
        (["launch", "--run", "--", "torchrun", "x.py"], "torchrun starts its own worker group"),
    ],
)
def test_the_command_line_refuses_with_one_line_and_exit_2(argv, message):
    out = subprocess.run(
        [*trainyard(*argv[:1]), "--dry-run", *argv[1:]],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        errors="surrogateescape",
    )
    if message is None:  # odd bytes are a command like any other: planned, shown quoted
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[-1].endswith("-- 'a\x01b.py' '\udcff'")
        return
    assert out.returncode == 2, out.stdout
    assert out.stderr == f"error: {out.stderr.removeprefix('error: ').strip()}\n" and message in out.stderr
    assert "Traceback" not in out.stderr


# ------------------------------------------------------------------------------ real runs

WORKER = r"""
import json, os, sys
out = os.path.join(os.environ["OUT"], "rank" + os.environ["RANK"] + ".json")
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TRAINYARD_CHECKPOINT_DIR", "TRAINYARD_PREFLIGHT", "PET_NO_PYTHON")
with open(out, "w") as fh:
    json.dump({"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in keys}}, fh)
"""


def _script(tmp_path: Path, text: str, name: str = "worker.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.torchrun  # real torchrun and worker processes
def test_two_workers_run_the_script_with_its_arguments_untouched(tmp_path):
    import json

    script = _script(tmp_path, WORKER)
    hostile = ["--nnodes", "9", "--", "-m", "a b", "$(touch /tmp/x)", "é", ""]
    out = subprocess.run(
        trainyard("launch", "--nproc-per-node", "2", "--run", "--", "python", str(script), *hostile),
        capture_output=True,
        text=True,
        env=clean_env(OUT=str(tmp_path), TRAINYARD_CHECKPOINT_DIR="/checkpoints/mine", PET_NO_PYTHON="1"),
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "preflight passed" in out.stdout
    assert "launch: TRAINYARD_CHECKPOINT_DIR=/checkpoints/mine: your loop saves and resumes" in out.stdout
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, s in enumerate(seen):
        assert s["argv"] == hostile
        assert s["env"]["RANK"] == s["env"]["LOCAL_RANK"] == str(rank) and s["env"]["WORLD_SIZE"] == "2"
        assert s["env"]["TRAINYARD_CHECKPOINT_DIR"] == "/checkpoints/mine"
        assert s["env"]["TRAINYARD_PREFLIGHT"].startswith("webhook=warn,") and s["env"]["PET_NO_PYTHON"] is None


@pytest.mark.torchrun  # real torchrun and worker processes
def test_the_workers_exit_status_is_launchs(tmp_path):
    script = _script(tmp_path, "import os, sys\nsys.exit(7 if os.environ['RANK'] == '1' else 0)\n")
    out = subprocess.run(
        trainyard("launch", "--nproc-per-node", "2", "--max-restarts", "0", "--run", "--", "python", str(script)),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr  # torchrun's ChildFailedError: exit 1


def _nccl_worker(tmp_path: Path, log: str, then: str) -> Path:
    """A worker that leaves the NCCL log of a real run where NCCL_DEBUG_FILE says, then ``then``."""
    return _script(
        tmp_path,
        "import os, shutil, socket, time\n"
        "pattern = os.environ['NCCL_DEBUG_FILE']\n"
        "path = pattern.replace('%h', socket.gethostname().split('.')[0]).replace('%p', str(os.getpid()))\n"
        f"shutil.copy({str(NCCL_LOGS / log)!r}, path + '.part'); os.replace(path + '.part', path)\n"
        "assert os.environ['NCCL_DEBUG'] == 'INFO'\n" + then + "\n",
    )


def _nccl_env(tmp_path: Path) -> dict[str, str]:
    logs = tmp_path / "nccl"
    logs.mkdir()
    return clean_env(TRAINYARD_EXPECT_TRANSPORT="IB", NCCL_DEBUG_FILE=str(logs / "nccl.%h.%p.log"))


@pytest.mark.torchrun  # real torchrun and worker processes
def test_a_socket_fallback_on_an_ib_fabric_stops_the_foreign_job(tmp_path):
    # the worker would wait for ever: launch must stop it, from what the NCCL log says
    script = _nccl_worker(tmp_path, "socket_fallback.log", "time.sleep(3600)")
    out = subprocess.run(
        trainyard("launch", "--skip-preflight", "--max-restarts", "0", "--run", "--", "python", str(script)),
        capture_output=True,
        text=True,
        env=_nccl_env(tmp_path),
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "launch: error: NCCL fell back to TCP sockets" in out.stdout
    assert "launch: stopping the workers: NCCL does not use the fabric's transport" in out.stdout


@pytest.mark.torchrun  # real torchrun and worker processes
def test_an_allowed_fallback_is_a_warning_and_ib_is_reported(tmp_path):
    script = _nccl_worker(tmp_path, "socket_fallback.log", "")
    argv = ["launch", "--skip-preflight", "--allow-transport-fallback", "--run", "--", "python", str(script)]
    out = subprocess.run(trainyard(*argv), capture_output=True, text=True, env=_nccl_env(tmp_path), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "(continuing: --allow-transport-fallback)" in out.stdout

    (tmp_path / "ib").mkdir()
    script = _nccl_worker(tmp_path / "ib", "ib_gdr.log", "")
    argv = ["launch", "--skip-preflight", "--run", "--", "python", str(script)]
    out = subprocess.run(trainyard(*argv), capture_output=True, text=True, env=_nccl_env(tmp_path / "ib"), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "launch: NCCL transport: NCCL uses IB" in out.stdout


@pytest.mark.torchrun  # real torchrun and worker processes
def test_a_job_without_nccl_says_the_transport_was_not_checked(tmp_path):
    script = _script(tmp_path, "pass\n")
    argv = ["launch", "--skip-preflight", "--run", "--", "python", str(script)]
    out = subprocess.run(trainyard(*argv), capture_output=True, text=True, env=_nccl_env(tmp_path), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the NCCL transport was not checked: no worker wrote NCCL log lines" in out.stdout


@pytest.mark.torchrun  # real torchrun and worker processes
def test_a_log_left_by_an_earlier_run_is_not_judged(tmp_path):
    env = _nccl_env(tmp_path)
    shutil.copy(NCCL_LOGS / "socket_fallback.log", Path(env["NCCL_DEBUG_FILE"].replace("%h.%p", "old.1")))
    script = _script(tmp_path, "pass\n")
    argv = ["launch", "--skip-preflight", "--run", "--", "python", str(script)]
    out = subprocess.run(trainyard(*argv), capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.torchrun  # real torchrun and worker processes
def test_launch_serves_preflight_and_transport_but_no_step_series(tmp_path):
    """A worker scrapes launch's endpoint while it runs: the series a foreign loop can have, and no
    step counter that would stay 0 (TrainyardJobStalled would read it as a hung job)."""
    port = _free_port()
    scrape = (
        "import urllib.request\n"
        f"text = urllib.request.urlopen('http://127.0.0.1:{port}/metrics', timeout=30).read().decode()\n"
        f"open({str(tmp_path / 'metrics.txt')!r}, 'w').write(text)\n"
    )
    script = _nccl_worker(tmp_path, "ib_gdr.log", scrape)
    env = _nccl_env(tmp_path)
    env["TRAINYARD_METRICS_PORT"] = str(port)
    argv = ["launch", "--run", "--", "python", str(script)]
    out = subprocess.run(trainyard(*argv), capture_output=True, text=True, env=env, timeout=120)
    text = (tmp_path / "metrics.txt").read_text()
    assert f"launch: metrics (preflight, NCCL transport) on port {port}" in out.stdout
    assert 'trainyard_trainer_preflight_check{check="webhook",fabric="none",node_rank="0",status="warn"} 1.0' in text
    assert "trainyard_trainer_steps_total" not in text and "trainyard_trainer_step " not in text


@pytest.mark.torchrun  # real torchrun and worker processes
def test_the_pods_sigterm_reaches_the_workers(tmp_path):
    """The kubelet stops a pod with SIGTERM to launch; torchrun must pass it to the workers."""
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = _script(
        tmp_path,
        "import signal, sys, time\n"
        f"def stop(*_):\n    open({str(got)!r}, 'w').write('SIGTERM'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(3600)\n",
    )
    proc = subprocess.Popen(
        trainyard("launch", "--skip-preflight", "--max-restarts", "0", "--run", "--", "python", str(script)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(),
    )
    try:
        deadline = time.monotonic() + 90
        while not ready.exists():  # the worker has its handler in place
            assert proc.poll() is None and time.monotonic() < deadline, "the worker never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert got.read_text() == "SIGTERM"
    assert proc.returncode != 0  # torchrun reports the stop (SignalException)


def test_launch_run_is_documented_in_the_help():
    out = subprocess.run(trainyard("launch", "--help"), capture_output=True, text=True, env=clean_env(), timeout=60)
    assert "trainyard launch [LAUNCH OPTIONS] --run -- COMMAND [ARGS...]" in out.stdout
    assert "TRAINYARD_CHECKPOINT_DIR" in out.stdout

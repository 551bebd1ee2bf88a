"""``tilewise worker`` and ``tilewise serve``.

``tilewise worker`` runs one worker in this process (see :mod:`tilewise.worker`).
``tilewise serve`` runs the API (uvicorn, in this process) and N worker processes that it
supervises: a worker that dies is started again; SIGTERM or SIGINT stops the API, then asks
every worker to stop (each finishes its trial in flight and hands its job back), then exits.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tilewise.cli._common import DbOpt, TargetOpt, app, err, fail, settings_for

if TYPE_CHECKING:
    from tilewise.settings import Settings

log = logging.getLogger("tilewise.serve")

#: The app factory `serve` runs: ``create_app(settings) -> FastAPI``.
DEFAULT_APP = "tilewise.api.app:create_app"

#: A worker that dies sooner than this after its start is restarted after a growing delay.
QUICK_DEATH_S = 10.0
MAX_RESTART_DELAY_S = 60.0


#: Seconds an idle HTTP connection stays open (see serve).
KEEP_ALIVE_S = 65


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def service_settings(settings: Settings, host: str) -> Settings:
    """The settings `serve` runs with: dev mode (writes without a token) on a loopback address
    without a token; refused on any other address without a token.

    Raises:
        ConfigError: ``host`` is not a loopback address and no API token is set.
    """
    from tilewise.errors import ConfigError

    if settings.api_token:
        # With a token set, dev mode is only what TILEWISE_DEV_MODE asks, and never leaves
        # loopback.
        return settings.model_copy(update={"dev_mode": settings.dev_mode and is_loopback(host)})
    if is_loopback(host):
        return settings.model_copy(update={"dev_mode": True})
    # An empty host binds every interface, as 0.0.0.0 does.
    where = repr(host) if host.strip() else "every interface (host '')"
    raise ConfigError(
        f"refusing to serve on {where} without an API token: anyone who can reach it could"
        " queue jobs. Set TILEWISE_API_TOKEN (clients send `Authorization: Bearer <token>`),"
        " or serve on 127.0.0.1 for local use"
    )


def load_app_factory(spec: str) -> Callable[[Settings], Any]:
    from tilewise.errors import ConfigError

    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        factory: Callable[[Settings], Any] = getattr(module, attr or "create_app")
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load the API app {spec!r}: {exc}") from exc
    return factory


# -------------------------------------------------------------------------------------------
# Worker processes


@dataclass
class _Slot:
    device: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    delay: float = 0.0
    not_before: float = 0.0


class WorkerPool:
    """N ``tilewise worker`` processes, restarted when they die, stopped on :meth:`stop`.

    Each runs in its own session, so a Ctrl-C in the terminal reaches only `serve`, which then
    stops them with SIGTERM (the graceful stop) in order.
    """

    def __init__(self, *, count: int, target: str, db_url: str, grace_s: float) -> None:
        self.target, self.db_url, self.grace_s = target, db_url, grace_s
        self.slots = [_Slot(device=i) for i in range(count)]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="tw-pool", daemon=True)
        self.restarts = 0

    def _spawn(self, slot: _Slot) -> None:
        cmd = [
            sys.executable,
            # Not the working directory first on sys.path (-m would put it there): a folder
            # named tilewise in it (the clone's parent directory) would shadow the package.
            "-P",
            "-m",
            "tilewise.cli",
            "worker",
            "--target",
            self.target,
            "--device",
            str(slot.device),
            "--parent-pid",
            str(os.getpid()),
        ]
        # The URL goes through the environment: argv is visible to every user (ps).
        env = dict(os.environ, TILEWISE_DB_URL=self.db_url)
        slot.proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        slot.started = time.monotonic()
        log.info("serve: started worker %d (pid %d)", slot.device, slot.proc.pid)

    def start(self) -> None:
        for slot in self.slots:
            self._spawn(slot)
        self._thread.start()

    def _supervise(self) -> None:
        while not self._stopping.wait(0.5):
            now = time.monotonic()
            for slot in self.slots:
                if slot.proc is None or slot.proc.poll() is None:
                    if slot.proc is None and now >= slot.not_before and not self._stopping.is_set():
                        self._spawn(slot)
                    continue
                code = slot.proc.returncode
                lived = now - slot.started
                slot.delay = (
                    min(MAX_RESTART_DELAY_S, max(1.0, 2 * slot.delay))
                    if lived < QUICK_DEATH_S
                    else 0.0
                )
                log.warning(
                    "serve: worker %d (pid %d) exited with %s after %.0f s; restarting%s",
                    slot.device,
                    slot.proc.pid,
                    code,
                    lived,
                    f" in {slot.delay:.0f} s" if slot.delay else "",
                )
                slot.proc = None
                slot.not_before = now + slot.delay
                self.restarts += 1

    def stop(self) -> None:
        """SIGTERM every worker, wait ``grace_s`` for them, then kill the rest."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        procs = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("serve: worker pid %d did not stop in time: killed", proc.pid)
                proc.kill()
                proc.wait()


# -------------------------------------------------------------------------------------------
# Commands


def _check_runnable(target: str, settings: Settings) -> None:
    """Raises what a worker would stop on at its start (the target's toolkit or device missing
    here): `serve` refuses to start workers that would only exit, restarted without end.

    Raises:
        TilewiseError: the target is unknown, or its backend cannot run kernels on this host
            (the message says that ``--workers 0`` serves the API alone).
    """
    from tilewise.errors import BackendError
    from tilewise.kernels.backends import create_backend
    from tilewise.kernels.targets import get_target

    profile = get_target(target)
    try:
        with create_backend(profile.backend, settings=settings, target=profile) as backend:
            backend.check_runnable()
    except BackendError as exc:
        raise BackendError(f"{exc} (--workers 0 serves the API alone)") from exc


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)


@app.command("worker")
def worker(
    target: TargetOpt = "cpu-twin",
    device: Annotated[
        int | None,
        # At most int32: the workers table stores it so; a larger one would make every
        # heartbeat fail on PostgreSQL while the worker ran on, unseen.
        typer.Option(min=0, max=2**31 - 1, help="Device (NPU) index this worker uses."),
    ] = None,
    db: DbOpt = None,
    max_jobs: Annotated[
        int | None, typer.Option("--max-jobs", min=1, help="Exit after this many jobs.")
    ] = None,
    exit_when_idle: Annotated[
        bool,
        typer.Option("--exit-when-idle", help="Exit when no job is waiting (batch use)."),
    ] = False,
    strategy: Annotated[
        str, typer.Option(help="Search strategy of the studies it runs and assists.")
    ] = "default",
    parent_pid: Annotated[int | None, typer.Option(hidden=True)] = None,
) -> None:
    """Claim queued jobs of TARGET from the database and tune them, until SIGTERM/SIGINT.

    On SIGTERM or SIGINT the trial in flight completes, then the job is finished (budget
    spent) or handed back to the queue for another worker; the exit code is 0.
    """
    from tilewise import store
    from tilewise.errors import TilewiseError
    from tilewise.worker import (
        Worker,
        block_stop_signals,
        stop_on_signals,
        unblock_stop_signals,
    )

    _configure_logging()
    # Before any thread or child process exists: they inherit the blocked signals, and a
    # signal that arrives meanwhile waits for stop_on_signals.
    block_stop_signals()
    try:
        settings = settings_for(db)
        store.check_persistent(settings.db_url)
        w = Worker(
            settings=settings,
            target=target,
            device=device,
            max_jobs=max_jobs,
            exit_when_idle=exit_when_idle,
            parent_pid=parent_pid,
            strategy=strategy,
        )
    except TilewiseError as exc:
        unblock_stop_signals()  # no worker runs: nothing started since inherits the block
        fail(str(exc))
    stop_on_signals(w)
    done = w.run()
    err.print(f"worker {w.id}: stopped after {done} job(s)", highlight=False)


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            min=0,
            help="Local worker processes (0: API only). On the cpu-twin each uses every "
            "core while it measures, so more than one per host skews timings.",
        ),
    ] = 1,
    target: TargetOpt = "cpu-twin",
    db: DbOpt = None,
    app_factory: Annotated[str, typer.Option("--app", hidden=True)] = DEFAULT_APP,
) -> None:
    """Run the REST API and local workers on one database (default: the SQLite file)."""
    from tilewise import store
    from tilewise.errors import TilewiseError

    _configure_logging()
    try:
        settings = service_settings(settings_for(db), host)
        store.check_persistent(settings.db_url)
        store.open_store(settings.db_url).close()  # create / check the schema once
        if workers:
            _check_runnable(target, settings)
        api = load_app_factory(app_factory)(settings)
    except TilewiseError as exc:
        fail(str(exc))
    if settings.dev_mode:
        # With a token set, dev mode is TILEWISE_DEV_MODE's doing: setting a token is no cure.
        cure = (
            "unset TILEWISE_DEV_MODE to require the token set"
            if settings.api_token
            else "set TILEWISE_API_TOKEN to require one"
        )
        err.print(
            f"dev mode: writes need no token (listening on {host} only); {cure}",
            highlight=False,
            soft_wrap=True,
        )

    import uvicorn

    # Idle connections are kept longer than clients keep theirs (httpx: 5 s, uvicorn's own
    # default too): at equal timeouts a client could reuse one as the server closed it, and
    # the request failed with "server disconnected without sending a response".
    config = uvicorn.Config(
        api, host=host, port=port, log_level="info", timeout_keep_alive=KEEP_ALIVE_S
    )
    server = uvicorn.Server(config)
    signalled: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        # Before uvicorn takes the signals over, and again when it re-raises them after
        # its shutdown: not the default action (which would kill `serve` mid-cleanup).
        signalled.append(signum)
        server.should_exit = True

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    pool = WorkerPool(
        count=workers,
        target=target,
        db_url=settings.db_url,
        grace_s=settings.build_timeout_s + 2 * settings.run_timeout_s,
    )
    try:
        pool.start()
        # uvicorn exits by itself when it cannot bind: said on the error line below.
        with contextlib.suppress(SystemExit):
            server.run()
    finally:
        pool.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if not server.started and not signalled:
        fail(f"the API could not start on {host}:{port} (see the log above)")

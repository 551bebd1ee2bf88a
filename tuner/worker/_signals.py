"""Stopping a worker by signal: SIGTERM or SIGINT finish the trial in flight, then stop; a
second one exits at once."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilewise.worker._worker import Worker

log = logging.getLogger("tilewise.worker")

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def block_stop_signals() -> None:
    """Block SIGTERM and SIGINT in the calling thread and everything it starts afterwards:
    threads, and child processes (the mask survives ``exec``). Call from the main thread
    before anything else is started."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def unblock_stop_signals() -> None:
    """Undo :func:`block_stop_signals` (a command that ends before it runs a worker: a caller
    in the same process, a test's, must not keep the signals blocked)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def stop_on_signals(worker: Worker) -> None:
    """Stop ``worker`` gracefully on SIGTERM or SIGINT; a second signal exits at once.

    The signals are blocked (:func:`block_stop_signals`) and received by a dedicated thread
    (``sigwait``). The block is inherited by the compiler and runner children, so a Ctrl-C in a
    terminal (sent to the whole process group) cannot kill the trial in flight and leave a
    false "crashed" record behind.
    """
    signals = set(STOP_SIGNALS)
    block_stop_signals()

    def wait() -> None:
        first = signal.sigwait(signals)
        log.warning(
            "worker %s: %s: finishing the trial in flight, then stopping (again to exit now)",
            worker.id,
            signal.Signals(first).name,
        )
        worker.stop()
        second = signal.sigwait(signals)
        log.error("worker %s: %s again: exiting now", worker.id, signal.Signals(second).name)
        os._exit(128 + second)

    threading.Thread(target=wait, name="tw-signals", daemon=True).start()

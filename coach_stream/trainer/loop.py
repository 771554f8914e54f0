"""The trainer loop: ExperienceReader -> learner -> Announcer, until the run is done.

It owns what every learner (PPO, IMPALA, DQN, SAC) shares: reading the experience log,
counting env steps and policy lag (newest announced version minus each chunk's behaviour
version), publishing versions through the ``Announcer`` (the newest announced version
always has a trainer state at or before it: the first state is saved before its version is
announced, later ones right after theirs, so with ``checkpoint_every`` 1 a version has its
own state once its announcement returned), watching the control topic for
``EvaluationReport``s, and ending the run: target return reached (mean of the last
``eval_episodes`` greedy returns) or env-step budget spent, or, for a shadow learner
(``coach-stream attach``: another run's experience, ``SourceRun``), that run finished and
was read to its end. ``env_steps`` (the budget, and what ``learn`` anneals by) counts the
steps the learner kept: steps it dropped as stale (SYNC PPO's late versions, IMPALA's
too-old chunks) are counted apart, in ``dropped_stale_steps``.

Resume after ``kill -9``: ``trainer.resume`` finds the newest trainer state, and the reader
seeks to its positions. Restored weights the control topic never announced are announced as
a new version, so SYNC workers and the trainer agree again. Versions announced but no state
stored is a ``ResumeError``: starting over would silently discard the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from coach_stream.checkpoints.serialization import policy_to_bytes
from coach_stream.control.announcer import Announcer
from coach_stream.core import (
    CheckpointStore,
    Collective,
    ControlLogReader,
    ControlMessage,
    ControlPublisher,
    EvaluationReport,
    EventSink,
    ExperienceChunk,
    ExperienceReader,
    Learner,
    PolicyVersion,
    RunFinished,
    SourceRun,
)
from coach_stream.errors import (
    ResumeError,
)
from coach_stream.trainer.collective import SOLO
from coach_stream.trainer.ledger import ChunkLedger
from coach_stream.trainer.progress import ProgressMeter
from coach_stream.trainer.resume import (
    lost_state_message,
    merged_state,
    newest_state,
    refill,
    state_part,
)
from coach_stream.trainer.settings import TrainerSettings
from coach_stream.trainer.state import TrainerState, state_to_bytes

log = logging.getLogger(__name__)


class Trainer:
    """``run()``, or ``start()`` + ``iterate()`` for tests that interleave it with workers."""

    def __init__(
        self,
        learner: Learner,
        reader: ExperienceReader,
        control: ControlLogReader,
        publisher: ControlPublisher,
        store: CheckpointStore,
        settings: TrainerSettings,
        events: EventSink,
        generator: torch.Generator,
        clock: Callable[[], float] = time.monotonic,
        source: SourceRun | None = None,
        collective: Collective = SOLO,
    ) -> None:
        self.learner, self.reader, self.control = learner, reader, control
        self.collective = collective  # K data-parallel ranks: rank 0 announces and stores
        self.source = source  # a shadow learner's source run: None for a run's own trainer
        self.publisher, self.store, self.settings = publisher, store, settings
        self.events, self.generator, self.clock = events, generator, clock
        self.announcer: Announcer | None = None
        self.version = -1
        self.env_steps = 0
        self._unagreed_steps = 0  # steps this rank read since the ranks last summed them
        self.dropped_stale = 0
        self.dropped_stale_steps = 0
        self.ledger = ChunkLedger()
        self.resumed_from: int | None = None
        self.finished: RunFinished | None = None
        self.last_policy: PolicyVersion | None = None
        self.last_checkpoint: tuple[int, float] | None = None  # (version, Unix time saved)
        self._metrics: dict[str, float] = {}
        self._after_refill: list[ExperienceChunk] = []  # read past the stored positions
        self._restored_positions: dict[int, int] = {}  # every rank's, for the other ranks
        self._parts: list[dict[str, Any]] = []  # every rank's part of the next state
        self.progress = ProgressMeter(clock, settings.eval_episodes)
        self._last_control = 0.0

    # ------------------------------------------------------------------ the loop

    def run(self) -> RunFinished:
        done = self.start()
        while done is None:
            done = self.iterate()
        return done

    def start(self) -> RunFinished | None:
        """Resume from the newest trainer state, or announce version 0; None unless finished.

        Raises ``ResumeError`` when versions were announced but no trainer state is stored.
        With K ranks, rank 0 does that and hands the result (weights, optimizer, counters,
        every rank's positions) to the others, which take it as theirs.
        """
        collective = self.collective
        if collective.world == 1:
            return self._start_lead()
        if collective.rank == 0:
            done = self._start_lead()
            collective.broadcast_object(self._handover(done))
            return done
        return self._join(collective.broadcast_object(None))

    def _start_lead(self) -> RunFinished | None:
        newest = self._absorb(self.control.read_to_end(self.settings.control_catchup_s))
        if self.finished is not None:  # restarted after the run ended: nothing to do
            self.last_policy = newest
            self._report_finished(self.finished)
            return self.finished
        self.announcer = Announcer(
            self.store,
            self.publisher,
            self.settings.run_id,
            keep_last=self.settings.keep_policies,
            keep_trainer_states=self.settings.keep_trainer_states,
            last_announced=newest,
        )
        state = newest_state(self.store, self.settings.run_id)
        if state is None:
            if newest is not None:
                raise ResumeError(lost_state_message(self.store, self.settings.run_id, newest))
            self._publish(save_state=True, gather=False)
            return None
        self._restore(state)
        if newest is not None and newest.version == state.version:
            self.version, self.last_policy = newest.version, newest
        else:  # restored weights were never announced (or newer ones were): announce them
            self._publish(save_state=False, gather=False)
        self.events(
            "resumed",
            {
                "from_version": state.version,
                "version": self.version,
                "env_steps": self.env_steps,
                "positions": state.positions,
            },
        )
        self._consume(self._after_refill)
        self._after_refill = []
        if self.collective.world == 1:  # K ranks: the first pass's _agree sums them
            self.env_steps += self._unagreed_steps
            self._unagreed_steps = 0
        return None

    def _handover(self, done: RunFinished | None) -> dict[str, object]:
        """What rank 0's start leaves the other ranks to start from."""
        return {
            "finished": done,
            "version": self.version,
            "env_steps": self.env_steps,
            "learner": self.learner.state_dict(),
            "positions": self._restored_positions,
            "last_seqs": dict(self.ledger.last_seqs),
            "resumed_from": self.resumed_from,
        }

    def _join(self, handover: dict[str, Any]) -> RunFinished | None:
        """A rank other than 0 takes rank 0's start as its own (its counters start at 0:
        rank 0 holds the stored ones, and a state sums every rank's)."""
        if handover["finished"] is not None:
            self.finished = handover["finished"]
            self._report_finished(self.finished)
            return self.finished
        self.learner.load_state_dict(handover["learner"])
        self.version, self.env_steps = handover["version"], handover["env_steps"]
        self.progress.rebase(self.env_steps, self.learner.updates)
        self.resumed_from = handover["resumed_from"]
        self.ledger.restore(handover["last_seqs"], {})
        if self.settings.refill:  # its replay buffer: its own partitions' log, re-read
            self._consume(self._refill(handover["positions"]))
        else:
            self.reader.seek(handover["positions"])  # its own partitions' part of them
        self.events(
            "joined",
            {
                "rank": self.collective.rank,
                "version": self.version,
                "env_steps": self.env_steps,
                "positions": dict(self.reader.positions()),
            },
        )
        return None

    def iterate(self) -> RunFinished | None:
        """Read, learn, publish, check for the end: one pass, at most ``read_timeout_s`` idle."""
        stop = self._stop_wanted()
        if stop and self.collective.world == 1:  # one trainer ends before it reads more
            return self._stop(stop)
        learner = self.learner
        seconds, clock = self.progress.seconds, self.clock
        if learner.wants_data():
            timeout = 0.0 if learner.ready() else self.settings.read_timeout_s
            t0 = clock()
            self._consume(self.reader.read(self.settings.read_batch, timeout))
            seconds["read_s"] += clock() - t0
        stop = self._agree(stop)
        if stop:
            return self._stop(stop)
        if learner.ready():
            t0 = clock()
            metrics, publish = learner.learn(self.env_steps)
            t1 = clock()
            seconds["learn_s"] += t1 - t0
            self._metrics.update(metrics)
            if publish:
                self._publish(save_state=True)
                seconds["publish_s"] += clock() - t1
        if self.env_steps >= self.settings.env_step_budget:
            return self._end("budget_exhausted")
        if self.source is not None and self.source.exhausted():
            return self._end("source_exhausted")
        if self.progress.due(self.settings.log_every_s):
            self._log_progress()
        return None

    # ------------------------------------------------------------------ the ranks' agreement

    _FINISHED, _TARGET = 1, 2  # why rank 0 stops the run (0: it does not)

    def _stop_wanted(self) -> int:
        """Rank 0's (or the one trainer's) reading of the control topic: stop now, and why.

        Only rank 0 reads it: ranks that read a RunFinished at different passes would leave
        one another waiting in a collective, so the others learn rank 0's verdict from
        ``_agree``.
        """
        if self.collective.rank != 0:
            return 0
        now = self.clock()
        if now - self._last_control >= self.settings.control_poll_s:
            self._absorb(self.control.poll(0.0))
            self._last_control = now
        if self.finished is not None:
            return self._FINISHED
        return self._TARGET if self.progress.target_reached(self.settings.target_return) else 0

    def _agree(self, stop: int) -> int:
        """Sum the steps every rank read this pass into ``env_steps`` (the budget and the
        learning-rate schedule count the run's steps, not a rank's) and tell every rank
        rank 0's ``stop``: one all-reduce of two numbers per pass."""
        if self.collective.world == 1:
            self.env_steps += self._unagreed_steps
            self._unagreed_steps = 0
            return stop
        mine = torch.tensor([float(self._unagreed_steps), float(stop)], dtype=torch.float64)
        steps, agreed = self.collective.sum(mine).tolist()
        self.env_steps += int(steps)
        self._unagreed_steps = 0
        return int(agreed)

    def _stop(self, stop: int) -> RunFinished:
        if stop == self._TARGET:
            return self._end("target_reached")
        reason = self.finished.reason if self.finished is not None else "finished"
        return self._end(reason, announce=False)

    # ------------------------------------------------------------------ experience

    def _consume(self, chunks: Sequence[ExperienceChunk]) -> None:
        if not chunks:
            return
        self.ledger.record(chunks)
        # A shadow's chunks carry the source's versions, which say nothing of how far its
        # own policy is from the one that acted: V-trace's truncated weights measure that,
        # so none is dropped as stale by version (0: every chunk's lag reads as none).
        ingested = self.learner.ingest(chunks, self.version if self.source is None else 0)
        self.dropped_stale += ingested.stale_chunks
        self.dropped_stale_steps += ingested.stale_steps
        # Steps dropped as stale were never learned from: they count toward neither the
        # budget nor the learner's schedule (``learn(env_steps)``); dropped_stale_steps has them.
        self._unagreed_steps -= ingested.stale_steps
        for chunk in chunks:
            self._unagreed_steps += chunk.num_steps
            if self.source is not None:  # another run's versions: no lag against ours
                if chunk.episode_return is not None:
                    self.progress.train_returns.append(chunk.episode_return)
                continue
            self.progress.chunk_read(max(0, self.version - chunk.policy_version))
            if chunk.episode_return is not None:
                self.progress.train_returns.append(chunk.episode_return)

    def _absorb(self, messages: Sequence[ControlMessage]) -> PolicyVersion | None:
        newest: PolicyVersion | None = None
        for message in messages:
            if message.run_id != self.settings.run_id:
                log.warning(
                    "ignoring a control message of run %s on run %s's topic",
                    message.run_id,
                    self.settings.run_id,
                )
            elif isinstance(message, EvaluationReport) and self.progress.evaluated(message.returns):
                self.events(
                    "evaluation",
                    {
                        "policy_version": message.policy_version,
                        "mean_return": message.mean_return,
                        "episodes": len(message.returns),
                    },
                )
            elif isinstance(message, RunFinished):
                self.finished = message
            elif isinstance(message, PolicyVersion) and (
                newest is None or message.version > newest.version
            ):
                newest = message  # a TrainerRendezvous is for the ranks, not for the loop
        return newest

    # ------------------------------------------------------------------ versions and state

    def _started_announcer(self) -> Announcer:
        """The announcer ``start()`` built; calling the loop before ``start()`` is a bug."""
        if self.announcer is None:
            raise RuntimeError("Trainer.start() must run before the trainer publishes or ends")
        return self.announcer

    def _publish(self, save_state: bool, gather: bool = True) -> None:
        """Announce the learner's weights as the next version (and store a trainer state).

        ``gather=False``: rank 0 publishing alone, in ``start`` (the others wait for its
        handover meanwhile); a state stored then holds rank 0's positions only, which is
        right for version 0 (every other partition starts at its beginning) and unused
        for a restored state's re-announcement (no state is stored).
        """
        if self.collective.world > 1 and gather:
            # every rank's part of the next state (positions, ledger, counters): a gather
            # on every publish, so that no rank has to know when rank 0 stores one
            self._parts = self.collective.gather_objects(self._part())
            if self.collective.rank != 0:  # rank 0 announces; the others count along
                self.learner.policy_state_dict()  # its normalisation snapshot moves on too
                self.version += 1
                self.reader.commit()
                return
        announcer = self._started_announcer()
        version = announcer.next_version
        state_due = save_state and version % self.settings.checkpoint_every == 0
        # Until this process has stored a trainer state, the state goes first: an announced
        # version needs a resume point at or before it, and a fresh run has none. After
        # that, a version is announced first and its state stored right after: the state
        # stored before stays the resume point meanwhile (at or before the new version),
        # and the workers act on the new version while the state is written, instead of
        # waiting for it (~8 ms of ~90 per SYNC CartPole version on a local disk, more on GCS).
        state_first = state_due and self.last_checkpoint is None
        if state_first:
            self._save_state(announcer, version)
        blob = policy_to_bytes(self.learner.policy_state_dict())
        self.last_policy = announcer.publish_policy(blob, self.learner.updates, self.env_steps)
        self.version = self.last_policy.version
        if state_due and not state_first:
            self._save_state(announcer, version)
        self.reader.commit()

    def _save_state(self, announcer: Announcer, version: int) -> None:
        announcer.save_trainer_state(version, state_to_bytes(self._state(version)))
        self.last_checkpoint = (version, time.time())

    def _part(self) -> dict[str, Any]:
        """This rank's share of a trainer state: where it read to and what it counted."""
        counters = {
            "dropped_stale": self.dropped_stale,
            "dropped_stale_steps": self.dropped_stale_steps,
        }
        return state_part(self.reader, self.ledger, counters)

    def _state(self, version: int) -> TrainerState:
        """The resume point: with K ranks, every rank's positions, and counters summed."""
        parts = self._parts if self.collective.world > 1 and self._parts else [self._part()]
        return merged_state(
            parts,
            version=version,
            env_steps=self.env_steps,
            learner=self.learner,
            generator=self.generator,
            eval_returns=list(self.progress.eval_returns),
        )

    def _restore(self, state: TrainerState) -> None:
        self.learner.load_state_dict(state.learner)
        torch.set_rng_state(state.torch_rng)
        self.generator.set_state(state.generator_rng)
        self.env_steps = state.env_steps
        # rates count from the resume, not from 0: else the first progress event reports
        # every step stored in the state as read within one interval
        self.progress.rebase(self.env_steps, self.learner.updates)
        self.dropped_stale = state.counters.get("dropped_stale", 0)
        self.dropped_stale_steps = state.counters.get("dropped_stale_steps", 0)
        self.ledger.restore(state.last_chunk_seqs, state.counters)
        evals = self.progress.eval_returns
        if not evals:  # the control topic, when readable, is the full record
            evals.extend(state.eval_returns)
        self.resumed_from = state.version
        self._restored_positions = dict(state.positions)
        if self.settings.refill:
            # leaves the reader at (or just past) the positions; what it read past them is
            # consumed once the restored version is announced
            self._after_refill = self._refill(state.positions)
        else:
            self.reader.seek(state.positions)

    def _refill(self, target: dict[int, int]) -> list[ExperienceChunk]:
        """Re-read the log up to ``target`` into the replay buffer (the log is the replay);
        return the chunks read past it."""
        if self.collective.world > 1:  # another rank re-reads the other partitions
            own = self.reader.positions()
            target = {p: offset for p, offset in target.items() if p in own}
        refilled, positions, after = refill(
            self.reader, self.learner, target, self.settings.refill_idle_s, self.clock
        )
        self.events("refilled", {"chunks": refilled, "positions": positions})
        return after

    # ------------------------------------------------------------------ progress and end

    def _end(self, reason: str, announce: bool = True) -> RunFinished:
        """Announce ``reason`` (unless a RunFinished was already read), commit and report."""
        if self.collective.rank != 0:  # rank 0 announces the end; the others just stop
            self.finished = RunFinished(
                self.settings.run_id, self.version, reason, int(time.time() * 1000)
            )
        elif announce:
            self.finished = self._started_announcer().finish(reason)
        if self.finished is None:
            raise RuntimeError(f"_end({reason!r}, announce=False) without a RunFinished read")
        self.reader.commit()
        self._log_progress()
        self._report_finished(self.finished)
        return self.finished

    def _report_finished(self, finished: RunFinished) -> None:
        self.events(
            "finished",
            {
                "reason": finished.reason,
                "final_version": finished.final_version,
                "checkpoint_uri": self.last_policy.uri if self.last_policy else None,
                "env_steps": self.env_steps,
                "updates": self.learner.updates,
                "wall_s": self.progress.wall_s(),
                "eval_mean_return": self.progress.eval_mean(),
                **self.ledger.counters(),
            },
        )

    def _log_progress(self) -> None:
        """One "progress" event, its keys namespaced as SB3 and CleanRL log them.

        ``time/``: counters, rates and where the trainer's time went; ``rollout/``: the
        experience it read; ``eval/``: the evaluator's returns; ``train/``: the learner's
        own metrics. The loop adds the ``train/`` prefix itself and uses it for nothing
        else, so a learner metric can never overwrite a loop field.
        """
        checkpoint = self.last_checkpoint
        fields: dict[str, object] = {
            "time/env_steps": self.env_steps,
            "time/updates": self.learner.updates,
            "time/policy_version": self.version,
            **self.progress.interval(self.env_steps, self.learner.updates),
            "rollout/dropped_stale": self.dropped_stale,
            "rollout/dropped_stale_steps": self.dropped_stale_steps,
            "rollout/dead_lettered": self.reader.dead_lettered,  # records unfit to train on
            "rollout/duplicate_chunks": self.ledger.duplicates,  # 0, or experience read twice
            "rollout/chunk_gaps": self.ledger.gaps,  # 0, or experience missing from the log
            "rollout/mean_return": self.progress.train_mean(),
            "eval/mean_return": self.progress.eval_mean(),
            **{f"train/{name}": value for name, value in self._metrics.items()},
            # status and /metrics: the resume point and its age; SILENT after 3x the interval
            "time/checkpoint_version": checkpoint[0] if checkpoint else None,
            "time/checkpoint_saved_at": checkpoint[1] if checkpoint else None,
            "time/log_every_s": self.settings.log_every_s,
        }
        self.events("progress", fields)

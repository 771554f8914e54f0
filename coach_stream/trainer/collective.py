"""Data-parallel trainer ranks: K processes that learn as one (``launch --trainers K``).

Each rank reads its share of the experience topic's partitions (``p % K == rank``),
computes gradients on the experience it holds and all-reduces them, so every rank applies
the same averaged gradient and holds the same weights; rank 0 alone stores checkpoints and
announces versions. The average is weighted by each rank's rows (``average_gradients``):
ranks fed by different numbers of workers hold different numbers of steps, and
``sum_r n_r g_r / sum_r n_r`` is the gradient of the mean loss over the union, so K ranks
given some chunks take the step one trainer given all of them would (within float
rounding; ``tests/unit/test_data_parallel.py``). Statistics a loss standardises by (PPO's
and IMPALA's advantage normalisation) are taken over the union too (``global_moments``).

``TorchCollective`` is ``torch.distributed`` with a deadline: a rank that dies mid
all-reduce makes the others raise ``RankLostError`` (exit 3: restarted) within
``timeout_s`` instead of hanging, and the group resumes from the newest trainer state.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Store, TCPStore  # typed here; re-exported untyped

from coach_stream.addresses import format_address
from coach_stream.core import Collective, Rendezvous
from coach_stream.errors import RankLostError

log = logging.getLogger(__name__)

_ATTEMPT_S = 5.0  # one try at reaching rank 0 before looking for a newer address


class Solo:
    """One trainer: every collective is the identity, and nothing is sent anywhere."""

    rank = 0
    world = 1

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        return values

    def broadcast_object(self, value: Any) -> Any:
        return value

    def gather_objects(self, value: Any) -> list[Any]:
        return [value]


SOLO = Solo()


class TorchCollective:
    """``torch.distributed`` over TCP: rank 0 listens where ``rendezvous`` says and tells the
    others, which find it through ``rendezvous`` (``trainer/rendezvous.py``)."""

    def __init__(
        self,
        rank: int,
        world: int,
        rendezvous: Rendezvous,
        timeout_s: float = 60.0,
        backend: str = "gloo",
    ) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside a world of {world}")
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        self._where = format_address(rendezvous.listen_address())
        timeout = timedelta(seconds=timeout_s)
        try:
            store = self._listen(rendezvous) if rank == 0 else self._find(rendezvous)
            dist.init_process_group(
                backend, store=store, rank=rank, world_size=world, timeout=timeout
            )
        except (RuntimeError, ValueError) as error:  # torch raises DistError subclasses
            raise self._lost("joining the group", error) from error
        # rank 0's store holds the listening socket: kept for the life of the group
        self._store: Store | None = store
        log.info("trainer rank %d of %d joined at %s (%s)", rank, world, self._where, backend)

    def _listen(self, rendezvous: Rendezvous) -> Store:
        """Rank 0: listen at the rendezvous address, then say so."""
        host, port = rendezvous.listen_address()
        store = TCPStore(
            host, port, self.world, is_master=True,
            timeout=timedelta(seconds=self.timeout_s), wait_for_workers=False,
        )  # fmt: skip
        rendezvous.announce((host, port))
        return store

    def _find(self, rendezvous: Rendezvous) -> Store:
        """The others: join rank 0 at the newest address known, looking again after each
        failed attempt (a rank 0 that moved announces its new address) until the deadline."""
        deadline = time.monotonic() + self.timeout_s
        failure: Exception = RuntimeError(
            f"rank 0 did not say where it listens within {self.timeout_s:g} s"
        )
        while (left := deadline - time.monotonic()) > 0:
            address = rendezvous.find_rank0(left)
            left = deadline - time.monotonic()
            if address is None or left <= 0:
                continue
            self._where = format_address(address)
            try:
                store = TCPStore(
                    address[0], address[1], self.world, is_master=False,
                    timeout=timedelta(seconds=min(_ATTEMPT_S, left)),
                )  # fmt: skip
                # the short timeout was for reaching rank 0; waiting on the store for
                # ranks that start later (as the group forms) gets the whole deadline
                store.set_timeout(timedelta(seconds=self.timeout_s))
                return store
            except (RuntimeError, ValueError) as error:
                failure = error
                log.warning("trainer rank %d could not reach rank 0 at %s", self.rank, self._where)
        raise failure

    def _lost(self, during: str, error: BaseException) -> RankLostError:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return RankLostError(
            f"trainer rank {self.rank} of {self.world} lost its group while {during} at "
            f"{self._where} ({first[:160]}); the ranks restart together from the newest "
            "trainer state (if this repeats, check that every rank can reach rank 0's address)."
        )

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        try:
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
        except (RuntimeError, ValueError) as error:
            raise self._lost("summing gradients", error) from error
        return values

    def broadcast_object(self, value: Any) -> Any:
        box = [value if self.rank == 0 else None]
        try:
            dist.broadcast_object_list(box, src=0)
        except (RuntimeError, ValueError) as error:
            raise self._lost("receiving rank 0's state", error) from error
        return box[0]

    def gather_objects(self, value: Any) -> list[Any]:
        out: list[Any] = [None] * self.world
        try:
            dist.all_gather_object(out, value)
        except (RuntimeError, ValueError) as error:
            raise self._lost("gathering positions", error) from error
        return out

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        self._store = None


def total_count(collective: Collective, count: int) -> int:
    """``count`` summed over the ranks."""
    if collective.world == 1:
        return count
    return int(collective.sum(torch.tensor([float(count)], dtype=torch.float64)).item())


def global_moments(
    collective: Collective, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (unbiased) standard deviation of ``values`` over every rank's rows."""
    if collective.world == 1:
        return values.mean(), values.std()
    local = values.detach().to(torch.float64)
    moments = torch.stack([torch.tensor(float(len(local))), local.sum(), (local**2).sum()])
    n, total, squares = collective.sum(moments.cpu()).tolist()
    mean = total / n if n else 0.0
    var = (squares - n * mean * mean) / (n - 1) if n > 1 else math.nan
    std = math.sqrt(max(var, 0.0)) if not math.isnan(var) else math.nan
    like = values.new_tensor
    return like(mean), like(std)


def average_optimizer_gradients(
    collective: Collective, optimizer: torch.optim.Optimizer, weight: float
) -> None:
    """``average_gradients`` over every parameter ``optimizer`` steps."""
    if collective.world > 1:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        average_gradients(collective, params, weight)


def average_gradients(
    collective: Collective, params: Sequence[torch.nn.Parameter], weight: float
) -> None:
    """Every parameter's ``.grad`` becomes ``sum_r weight_r grad_r / sum_r weight_r``.

    ``weight``: the rows this rank's loss averaged over (0 for a rank with none this step:
    its gradient is left out, not counted as a zero). One all-reduce of one flat buffer.
    """
    if collective.world == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.detach().reshape(-1).float().cpu() for g in grads])
    if weight == 0:
        flat.zero_()  # a rank with no rows may hold stale or NaN gradients: send nothing
    else:
        flat.mul_(weight)
    flat = collective.sum(torch.cat([flat, torch.tensor([float(weight)])]))
    total = float(flat[-1])
    if total == 0:
        raise RuntimeError("average_gradients called on a step where no rank had rows")
    flat = flat[:-1] / total
    offset = 0
    for param in params:
        size = param.numel()
        grad = flat[offset : offset + size].view_as(param).to(param.device, param.dtype)
        param.grad = grad.clone() if param.grad is None else param.grad.copy_(grad)
        offset += size

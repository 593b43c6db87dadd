"""torchft on ringreduce: a process group torchft's Manager reconfigures after each quorum,
as it does its own ProcessGroupGloo.

    from ringreduce.torchft import ProcessGroupRingReduce
    manager = torchft.Manager(pg=ProcessGroupRingReduce(), ...)

torchft (PyPI, 0.2.0 checked, with torch 2.15) calls configure(store_addr, replica_id, rank,
world_size, ...) with a fresh store prefix for every quorum: the group aborts the one it
had (its calls fail at once, on the peers too) and makes a ringreduce group through that
store. abort(), shutdown() and errored() are what the Manager asks between steps; errored()
gives the first failure of the current group (a dead peer, a timeout), which tells the
Manager to drop the step and form a new quorum. torchft's own wrapper forwards every
collective to the group.

Importing this module imports torchft; the rest of the package does not need it."""

from datetime import timedelta

from torchft.process_group import ProcessGroupWrapper

from .torch import BACKEND, ProcessGroupRingreduce


class ProcessGroupRingReduce(ProcessGroupWrapper):
    """torchft's reconfigurable process group, on a ringreduce group per quorum."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)

    def _create_pg(self, store, rank, world_size):
        # torchft hands a client of its store, already under this quorum's prefix.
        return ProcessGroupRingreduce(store, rank, world_size, self._timeout)

    def getBackendName(self) -> str:
        return f"torchft-{BACKEND}"

    def errored(self):
        pg = self._pg
        return pg.errored() if isinstance(pg, ProcessGroupRingreduce) else None

    def shutdown(self) -> None:
        """Free the current group (torchft's wrapper only drops its reference)."""
        pg, self._pg = self._pg, None
        if isinstance(pg, ProcessGroupRingreduce):
            pg.shutdown()

"""The survivors of a death go on (issue 26 item 5): revoke, errored and shrink on a
ringreduce torch group, and the shrunk group put where torch looks for groups.

    import ringreduce.torch as rrt
    try:
        train_step()
    except RuntimeError:
        rrt.revoke()                    # every rank still in a call on the group fails now
        pg = rrt.shrink()               # the survivors agree; pg is the new default group
        model = DDP(model.module)       # a new DDP on it (parameters from its rank 0)
    ...
    if rrt.grow_pending():              # at a step boundary: a restarted worker waits
        pg = rrt.grow()                 # it joins; pg (one rank more) is the new default
        model = DDP(model.module)       # the newcomer makes its DDP too: the same broadcast

and the restarted worker (RR_GROW_JOIN=1) calls rrt.join() instead of init_process_group.

shrink() runs the library's rr_pg_shrink (docs/elastic.md): the agreement goes over the old
group's own connections, so it needs no store, and rank 0, the host of torch's TCPStore, may
be the rank that died. torch's own dist.shrink_group cannot serve here: it needs the new
group as a C++ Backend and clones the old group's store (docs/torch.md, "Elastic"). grow(),
grow_pending() and join() run rr_pg_grow, rr_pg_grow_pending and rr_pg_join (docs/elastic.md,
"Growing back"): the growth's store is served by the current rank 0 at $RR_GROW_ADDR, not
torch's, for the same reason.

Nothing here knows the collectives; ringreduce/torch.py does."""

import ctypes
import datetime

import torch.distributed as dist

from . import _lib
from ._work import _timeout_ms  # timedelta or seconds -> ms; None or 0: 0 (the default)

c10d = dist.distributed_c10d
GROWN = "ringreduce~grown"  # torch's name of a grown default group, on members and newcomers


class ElasticMixin:
    """What ProcessGroupRingreduce adds for the survivors of a death (also torchft's
    ProcessGroup vocabulary: errored, abort, shutdown)."""

    _lib_ranks = None  # the library's global rank of each rank of this group; None: its own

    def _lr(self, rank):
        """The library's rank for group rank `rank` (roots and peers are the library's global
        ranks: a shrunk group keeps its members' old ones)."""
        ranks = self._lib_ranks
        return ranks[rank] if ranks and 0 <= rank < len(ranks) else rank

    def _group_rank(self, lib_rank):
        ranks = self._lib_ranks
        return ranks.index(lib_rank) if ranks and lib_rank in ranks else lib_rank

    def _failed(self, status, error):
        """Record the group's first failure (not a refusal of one call's arguments) for
        errored(); return the error to raise."""
        if status not in _lib.LOCAL_ERRORS and not self._errors:
            self._errors.append(error)
        return error

    def errored(self):
        """The first error that failed the group on this rank (a dead peer, a timeout, a
        revoke, ...), or None while it is healthy. What torchft's Manager asks after a
        step; a call that only refused its own arguments does not count."""
        return self._errors[0] if self._errors else None

    def revoke(self):
        """Fail every pending and later call on the group, here at once and on every rank
        that can still be reached (rr_pg_revoke); the group is kept for shrink(). From any
        thread; twice is harmless."""
        if self._pg.value:
            _lib.pg_revoke(self._pg)
            self._failed(_lib.EREVOKED, RuntimeError("ringreduce: the group was revoked on "
                                                     f"rank {self._rank}"))

    # torch 2.x's dist.shrink_group(ranks_to_exclude, group) asks the group's backend for this
    # and calls shrink() below; 1.13 has neither.
    supports_shrinking = True

    def shrink(self, ranks_to_exclude, shrink_flags=0, pg_options=None):
        """What dist.shrink_group calls (torch 2.x): the survivors agree (rr_pg_shrink; the
        application's list is checked against the agreement, not trusted) and torch gets the
        new group as a c10d Backend, which it registers in a ProcessGroup of its own."""
        new, old_ranks = self._shrink()
        gone = sorted(set(range(self._size)) - set(old_ranks))
        if gone != sorted(ranks_to_exclude):
            new.abort()
            raise RuntimeError(f"ringreduce: shrink_group on rank {self._rank}: the survivors "
                               f"agreed that ranks {gone} are gone, but the caller excluded "
                               f"{sorted(ranks_to_exclude)}")
        return _backend_view(new)

    def _shrink(self):
        """rr_pg_shrink: a new group of the survivors (this class, no store), and the old
        group ranks of its members in order. Raises when this rank has no group (no
        majority, left out)."""
        self._live("shrink")
        h = _lib.c_pg()
        st = _lib.pg_shrink(self._pg, 0, ctypes.byref(h))
        if st < 0:
            raise _error(f"shrink on rank {self._rank}", st)
        rank, size = _lib.get_rank(h), _lib.get_world_size(h)
        lib_ranks = [_lib.get_global_rank(h, i) for i in range(size)]
        mine = self._lib_ranks or list(range(self._size))
        new = type(self)(None, rank, size, self._timeout, adopt=h.value)
        new._lib_ranks = lib_ranks
        new._set_group_desc(f"{self.group_desc}:shrunk")
        return new, [mine.index(g) for g in lib_ranks]

    def _grow_pending(self, addr):
        """rr_pg_grow_pending: True on every member when a newcomer waits at addr."""
        self._live("grow_pending")
        waiting = ctypes.c_int(0)
        st = _lib.pg_grow_pending(self._pg, _addr(addr), ctypes.byref(waiting))
        if st < 0:  # a collective on the group: a dead peer fails it, as any call does
            raise self._failed(st, _error(f"grow_pending on rank {self._rank}", st))
        return bool(waiting.value)

    def _grow(self, addr, nnew, wait):
        """rr_pg_grow: a new group (this class, no store) of the members, ranks kept, then
        nnew newcomers. A growth that fails leaves this group as it was and usable (the
        library's promise), so the failure is not recorded for errored()."""
        self._live("grow")
        h = _lib.c_pg()
        st = _lib.pg_grow(self._pg, _addr(addr), int(nnew), _timeout_ms(wait), 0,
                          ctypes.byref(h))
        if st < 0:
            raise _error(f"grow on rank {self._rank}", st)
        new = type(self)(None, _lib.get_rank(h), _lib.get_world_size(h), self._timeout,
                         adopt=h.value)  # a new world: global rank = rank, no map
        new._set_group_desc(f"{self.group_desc}:grown")
        return new


def _error(what, st):
    name = _lib.status_name(st).decode()
    return RuntimeError(f"ringreduce: {what}: {_lib.error_text() or name} ({name})")


def _addr(addr):
    """The growth's address as the library takes it: None (or "") for $RR_GROW_ADDR."""
    return addr.encode() if addr else None


def _group(group):
    pg = group if group is not None else c10d._get_default_group()
    if not isinstance(pg, ElasticMixin):
        raise TypeError(f"ringreduce: {type(pg).__name__} is not a ringreduce process group "
                        "(init_process_group(\"ringreduce\") or new_group(backend=\"ringreduce\"))")
    return pg


def errored(group=None):
    """The error that failed `group` (default: the default group) on this rank, or None."""
    return _group(group).errored()


def revoke(group=None):
    """Revoke `group` (default: the default group): see ElasticMixin.revoke."""
    _group(group).revoke()


def shrink(group=None):
    """Called by every survivor after a failure of `group` (default: the default group):
    agree on who is left and return a group of them, ranks contiguous in the old order. The
    old group is revoked and destroyed. The new group takes the old one's place in torch:
    for the default group, as torch's shrink_group does, it becomes the default group, the
    ranks are renumbered (dist.get_rank(), get_world_size() answer for it) and every other
    group is aborted (their ranks no longer mean anything); for another group, it is
    registered beside the default with its members' global ranks. It has no store: new_group
    on it is not supported. Raises RuntimeError with the library's reason when this rank has
    no group (only a minority left, left out as too slow, a second death at the wrong time);
    the old group is revoked then, and the caller should exit."""
    old = _group(group)
    new, old_ranks = old._shrink()
    _adopt(old, new, old_ranks)
    old.shutdown()  # revoked: does not wait for anyone
    return new


def grow_pending(addr=None):
    """Called by every member of the default group at the same step boundary: is a newcomer
    (a process that called join()) waiting at `addr` ("host:port"; None: $RR_GROW_ADDR)?
    The same answer on every member (rank 0's, broadcast), so all of them grow at the same
    step. Cheap: one broadcast of an int; the group's rank 0 listens on the port from the
    first call until the group is destroyed or grown."""
    return _group(None)._grow_pending(addr)


def grow(nnew=1, addr=None, wait=None):
    """Called by every member of the default group at the same step boundary (e.g. when
    grow_pending() says so): grow it by `nnew` newcomers, each calling join() with the same
    address. `wait`: how long to wait for them (timedelta or seconds; None: the group's
    timeout). Returns the grown group, which becomes torch's default group as shrink()'s
    does: members keep their ranks, the newcomers follow, dist.get_world_size() is the new
    size, other groups are aborted, the old group is destroyed. It has no store (new_group
    on it is not supported). On failure (a newcomer did not come within `wait`, ...) raises
    RuntimeError on every member, and the default group is left as it was and usable."""
    old = _group(None)
    new = old._grow(addr, nnew, wait)
    _adopt(old, new, None)
    old.shutdown()  # healthy, nothing in flight (a step boundary): returns at once
    return new


def join(addr=None, timeout=None):
    """A newcomer's init_process_group (a restarted worker, started with RR_GROW_JOIN=1 by
    convention): join the group whose members call grow() at `addr` (None: $RR_GROW_ADDR),
    retrying until they do, within `timeout` (timedelta or seconds; None: $RR_TIMEOUT or the
    library's default). The grown group becomes torch's default group: dist.get_rank() is
    this process's rank in it (after the members'), dist.get_world_size() its size. It
    needs no RANK, WORLD_SIZE or MASTER_ADDR. Raises RuntimeError with the library's reason
    (nobody grew in time, the job token differs, the members gave up)."""
    from .torch import ProcessGroupRingreduce
    if dist.is_initialized():
        raise RuntimeError("ringreduce: join: this process already has a default group "
                           "(join() replaces init_process_group, it does not follow it)")
    ms = _timeout_ms(timeout)
    opts = _lib.PgOptions(None, -1, 0, ms, -1)
    h = _lib.c_pg()
    st = _lib.pg_join(_addr(addr), ctypes.byref(opts), ctypes.byref(h))
    if st < 0:
        raise _error("join", st)
    td = datetime.timedelta(milliseconds=ms) if ms else datetime.timedelta(minutes=30)
    new = ProcessGroupRingreduce(None, _lib.get_rank(h), _lib.get_world_size(h), td,
                                 adopt=h.value)
    new._set_group_desc("default_pg:joined")
    _register(new, GROWN, {i: i for i in range(new.size())}, True)
    return new


def _world_maps():
    """torch's bookkeeping of groups: (pg_map, pg_names, pg_group_ranks), 2.x's _world or
    1.13's module dictionaries."""
    w = getattr(c10d, "_world", None)
    if w is not None and hasattr(w, "pg_group_ranks"):
        return w.pg_map, w.pg_names, w.pg_group_ranks
    return c10d._pg_map, c10d._pg_names, c10d._pg_group_ranks


def _forget(pg):
    cleanup = getattr(c10d, "_cleanup_process_group_global_state", None)
    if cleanup is not None:
        cleanup(pg)  # 2.x: every map, tags and the C++ name registry
        return
    for m in _world_maps():
        m.pop(pg, None)


def _adopt(old, new, old_ranks):
    """Put `new` where torch had `old` (old_ranks: the old group ranks of new's members after
    a shrink; None after a growth, which only the default group makes)."""
    pg_map, pg_names, pg_group_ranks = _world_maps()
    if old not in pg_group_ranks:  # a group torch does not know: nothing to update
        return
    default = old is c10d._get_default_group()
    to_global = {g: gl for gl, g in pg_group_ranks[old].items()}
    if default:
        ranks = {i: i for i in range(new.size())}
        for pg in [p for p in list(pg_group_ranks) if p is not old]:
            if isinstance(pg, ElasticMixin):
                pg.abort()
            _forget(pg)
    else:
        ranks = {to_global[g]: i for i, g in enumerate(old_ranks)}
    # A grown group's name is the same on the newcomers (join()), whose history differs.
    name = GROWN if old_ranks is None else f"{pg_names.get(old, '') or 'ringreduce'}~s"
    _forget(old)
    _register(new, name, ranks, default)


def _register(new, name, ranks, default):
    """Enter `new` in torch's bookkeeping under `name`, global -> group ranks `ranks`; as
    the default group when `default`."""
    pg_map, pg_names, pg_group_ranks = _world_maps()
    new._set_group_name(name)
    register = getattr(c10d, "_register_pg_in_world", None)
    if register is not None:
        register(pg=new, backend_name="ringreduce", store=None, group_name=name,
                 backend_config="cpu:ringreduce", rank_mapping=ranks)
    else:
        pg_map[new], pg_names[new], pg_group_ranks[new] = ("ringreduce", None), name, ranks
    if default:
        c10d._update_default_pg(new)


_VIEW = []


def _backend_view(pg):
    """`pg` as a c10d Backend (torch 2.x): a Python subclass of torch's C++ Backend whose
    methods torch's dispatcher calls, each passing the call on to `pg` (torch's ProcessGroup
    can only hold a Backend)."""
    if not _VIEW:
        from torch._C._distributed_c10d import Backend as base
        names = [n for n in dir(base) if not n.startswith("__") and n in _pg_methods(type(pg))]

        def forward(name):
            return lambda self, *a, **k: getattr(self._pg_, name)(*a, **k)

        attrs = {n: forward(n) for n in names}
        attrs["__init__"] = lambda self, p: (base.__init__(self, p.rank(), p.size()),
                                             setattr(self, "_pg_", p))[0]
        attrs["__getattr__"] = lambda self, n: getattr(self.__dict__["_pg_"], n)
        _VIEW.append(type("RingreduceBackend", (base,), attrs))
    return _VIEW[0](pg)


def _pg_methods(cls):
    """Every method a ringreduce group defines itself (not inherited from torch)."""
    out = set()
    for k in cls.__mro__:
        if k.__module__.startswith("ringreduce"):
            out.update(n for n, v in vars(k).items() if callable(v))
    return out

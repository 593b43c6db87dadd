"""Sends and receives inside a coalescing block (batch_isend_irecv, _coalescing_manager):
each is held until the block ends (_P2P), then issued in an order that cannot deadlock
(_p2p_order). ringreduce/torch.py records and issues them."""

import collections

def _p2p_order(me, ops):
    """The order in which to issue a coalesced block's sends and receives so that no two
    ranks wait for each other: the library runs a group's calls one at a time, and a large
    send completes only once the peer receives it. Pairs of ranks are served in one global
    order (by lowest, then highest rank), the same on every rank, so waits cannot form a
    cycle; within a pair, messages keep their order (they match in order), and a send and a
    receive of one dtype go together as one sendrecv; otherwise the lower rank sends first.
    Returns a list of ("send", op), ("recv", op) or ("sendrecv", send_op, recv_op)."""
    by_peer = collections.OrderedDict()
    for op in ops:
        by_peer.setdefault(op.peer, []).append(op)
    plan = []
    for peer in sorted(by_peer, key=lambda p: (min(p, me), max(p, me))):
        sends = collections.deque(o for o in by_peer[peer] if o.kind == "send")
        recvs = collections.deque(o for o in by_peer[peer] if o.kind == "recv")
        while sends and recvs:
            s, r = sends.popleft(), recvs.popleft()
            if s.ldtype == r.ldtype:
                plan.append(("sendrecv", s, r))
            elif me < peer:
                plan += [("send", s), ("recv", r)]
            else:
                plan += [("recv", r), ("send", s)]
        plan += [("send", s) for s in sends] + [("recv", r) for r in recvs]
    return plan


class _P2P:
    """A send or receive recorded inside a coalescing block, issued when the block ends."""

    __slots__ = ("kind", "buf", "ldtype", "peer", "keep", "finish", "batch")

    def __init__(self, kind, buf, ldtype, peer, keep, finish, batch):
        self.kind, self.buf, self.ldtype, self.peer = kind, buf, ldtype, peer
        self.keep, self.finish, self.batch = keep, finish, batch

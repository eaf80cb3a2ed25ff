"""When a user reports, and with what budget (docs/ldp-reports.md).

Slots are the job's (``slot = (time - origin) // slot_ms``); ``start`` is the stream's first
slot, where the evaluation's slot 1 lies. The protocols follow the evaluation
(:mod:`mechanisms.baselines.ldp_ids`, :mod:`mechanisms.baselines.ldp`):

- ``lbu``: every slot, budget E/w (the uniform ledger).
- ``lsp``: the sampling ledger's slots start, start + w, start + 2w, ..., budget E.
- ``lpu``: population division: the whole E at one slot of each block of w slots, the slot
  ``start + b w + g`` of block ``b`` at the user's *group* ``g``, a public keyed hash of the
  user, w and the epoch (:func:`lpu_phase`) under the stream's public LPU key. Any w
  consecutive slots then hold at most one report. With ``rotate = 0`` the epoch is always 0:
  every user keeps one group, reporting every w slots, which is where the evaluation's LPU
  settles (a slot asks the users whose last round was w slots before). ``rotate = R > 0``
  draws new groups every R blocks; a user whose new group comes *before* its old one skips the
  epoch's first block, so no window holds two reports (about (w - 1)/(2 w R) of the blocks
  are skipped).
- ``plbu``: every slot, the user's own E_i/w_i.
- ``lbd``, ``lba`` (two rounds a slot, :mod:`mechanisms.local.rounds`): every slot a
  dissimilarity report at E/(2w); a publication report at the budget the collector's decision
  for the slot names, when it names one.
- ``mtsp`` (two rounds a slot over a tree, :mod:`mechanisms.local.tree`): every slot a
  dissimilarity report at E/(2w) over the user's level of the tree; a publication report over
  the decision's intervals at the budget it names.
- ``lpd``, ``lpa`` (two rounds a slot over a divided population,
  :mod:`mechanisms.local.population`): a dissimilarity report at E once every w slots (the
  user's phase) and publication reports at E where the slot's decision names the user's
  position; both checked against the decisions, not here.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

#: The protocols with two rounds a slot, the second as the collector decides: at the budget it
#: names (lbd, lba) or by the users it names (lpd, lpa: population division).
ROUND_PROTOCOLS: Final = ("lbd", "lba", "lpd", "lpa", "mtsp")
#: The two-round protocols that divide the population, every report at E.
POPULATION_PROTOCOLS: Final = ("lpd", "lpa")
#: The protocols that need the stream's public key (LPU's groups, LPD's, LPA's and MTSP's
#: positions).
KEYED: Final = ("lpu", *POPULATION_PROTOCOLS, "mtsp")
PROTOCOLS: Final = ("lbu", "lsp", "lpu", "plbu", *ROUND_PROTOCOLS)
#: The protocols whose w and E are the stream's, the same for every user.
HOMOGENEOUS: Final = ("lbu", "lsp", "lpu", *ROUND_PROTOCOLS)
#: The domain-separation prefix of LPU's group hash.
LPU_HASH_PREFIX: Final = b"pwevent-lpu-v1"


def report_budget(protocol: str, w: int, E: float) -> float:  # noqa: N803 - the papers' name
    """The budget one report spends: E/w (``lbu``, ``plbu``), E (``lsp``, ``lpu``, and every
    report of ``lpd``, ``lpa``) or, for a dissimilarity report, E/(2w) (``lbd``, ``lba``,
    ``mtsp``)."""
    if protocol in ("lbu", "plbu"):
        return float(E) / float(w)
    if protocol in ("lbd", "lba", "mtsp"):
        return float(E) / (2.0 * float(w))
    if protocol in ("lsp", "lpu", *POPULATION_PROTOCOLS):
        return float(E)
    raise ValueError(f"unknown protocol {protocol!r}; choose from {PROTOCOLS}")


def lpu_phase(key: str, user: str, w: int, epoch: int) -> int:
    """The user's LPU group in an epoch, in [0, w): HMAC-SHA256 keyed with the stream's public
    LPU key (UTF-8) over the prefix ``pwevent-lpu-v1`` and then, for each of the user, w and the
    epoch (both in decimal), its UTF-8 length as 4 big-endian bytes and its UTF-8 bytes; the
    first 8 bytes of the tag, read as a big-endian unsigned integer, modulo w."""
    mac = hmac.new(key.encode("utf-8"), LPU_HASH_PREFIX, hashlib.sha256)
    for part in (user, str(int(w)), str(int(epoch))):
        data = part.encode("utf-8")
        mac.update(len(data).to_bytes(4, "big"))
        mac.update(data)
    return int.from_bytes(mac.digest()[:8], "big") % int(w)


def reports_at(protocol: str, slot: int, *, start: int, w: int, key: str = "", user: str = "",
               rotate: int = 0) -> bool:
    """Whether the protocol has the user report at ``slot`` (never before ``start``)."""
    if slot < start:
        return False
    if protocol in ("lbu", "plbu", *ROUND_PROTOCOLS):
        return True
    offset = slot - start
    if protocol == "lsp":
        return offset % w == 0
    if protocol != "lpu":
        raise ValueError(f"unknown protocol {protocol!r}; choose from {PROTOCOLS}")
    block, position = divmod(offset, w)
    epoch = block // rotate if rotate else 0
    group = lpu_phase(key, user, w, epoch)
    if position != group:
        return False
    if rotate and block > 0 and block % rotate == 0:
        return group >= lpu_phase(key, user, w, epoch - 1)
    return True

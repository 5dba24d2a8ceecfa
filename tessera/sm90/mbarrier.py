"""The mbarrier object of sm_90a as a state machine, for the simulators.

Source: PTX ISA 9.1 section 9.7.13.15, https://docs.nvidia.com/cuda/parallel-thread-execution/#x with x =
parallel-synchronization-and-communication-instructions-mbarrier and its subsections -contents (9.7.13.15.2),
-phase (.4), -tracking-async-operations expect-tx / complete-tx (.5), -phase-completion (.6), -arrive-on (.7),
-init (.9), -test-wait-try-wait (.16).
"""

from __future__ import annotations

from dataclasses import dataclass

MBARRIER_BYTES = 8
"""An mbarrier is a .b64 object in shared memory, 8-byte aligned."""

MBARRIER_MAX_COUNT = 2**20 - 1
"""Expected arrival count: 1..2^20-1; pending arrival count: 0..2^20-1."""

MBARRIER_TX_LIMIT = 2**20 - 1
"""tx-count stays within [-(2^20-1), 2^20-1]."""


@dataclass
class MBarrierState:
    """phase, pending arrivals, expected arrivals and tx-count of one mbarrier. An object with expected == 0
    has not been initialised (a valid expected count is >= 1).

    The current phase completes when pending == 0 and tx_count == 0; then, atomically, phase += 1 and
    pending = expected. Arrive-on and complete-tx may complete the phase; expect-tx does not."""

    phase: int = 0
    pending: int = 0
    expected: int = 0
    tx_count: int = 0

    def init(self, count: int) -> None:
        """mbarrier.init [addr], count: phase 0, expected = pending = count (1..2^20-1), tx-count 0."""
        if not 1 <= count <= MBARRIER_MAX_COUNT:
            raise ValueError(f"mbarrier.init count must be in [1, {MBARRIER_MAX_COUNT}], got {count}")
        self.phase, self.pending, self.expected, self.tx_count = 0, count, count, 0

    def arrive(self, count: int = 1) -> int:
        """An arrive-on with `count` (default 1): pending -= count, then the phase may complete. Returns the
        phase before the arrival (the opaque `state` of mbarrier.arrive, usable with `test_wait`)."""
        self._check_initialised()
        if not 1 <= count <= MBARRIER_MAX_COUNT:
            raise ValueError(f"mbarrier.arrive count must be in [1, {MBARRIER_MAX_COUNT}], got {count}")
        if count > self.pending:
            raise ValueError(f"mbarrier.arrive count {count} exceeds the {self.pending} pending arrivals")
        state = self.phase
        self.pending -= count
        self._complete_if_done()
        return state

    def expect_tx(self, tx: int) -> None:
        """An expect-tx: tx-count += tx (bytes for TMA). Does not complete the phase."""
        self._check_initialised()
        self._add_tx(tx, +1, "expect_tx")

    def complete_tx(self, tx: int) -> None:
        """A complete-tx (a TMA copy landing, or mbarrier.complete_tx): tx-count -= tx, then the phase may
        complete. tx-count may go negative when a copy completes before its expect-tx."""
        self._check_initialised()
        self._add_tx(tx, -1, "complete_tx")
        self._complete_if_done()

    def arrive_expect_tx(self, tx: int) -> int:
        """mbarrier.arrive.expect_tx: expect-tx(tx), then an arrive-on with count 1."""
        self.expect_tx(tx)
        return self.arrive(1)

    def try_wait_parity(self, parity: int) -> bool:
        """mbarrier.try_wait.parity / test_wait.parity: True iff the phase of parity `parity` is the completed,
        immediately preceding phase, i.e. parity != phase & 1. On a fresh barrier parity 1 passes at once."""
        self._check_initialised()
        if parity not in (0, 1):
            raise ValueError(f"phaseParity must be 0 or 1, got {parity}")
        return parity != self.phase & 1

    def test_wait(self, state: int) -> bool:
        """mbarrier.test_wait / try_wait with the `state` an arrive returned: True if that phase completed.
        Only the current and the immediately preceding phase may be tested."""
        self._check_initialised()
        if state not in (self.phase, self.phase - 1):
            raise ValueError(f"test_wait on phase {state} while the barrier is in phase {self.phase}: only the "
                             "current and the immediately preceding phase can be tested")
        return state != self.phase

    def _add_tx(self, amount: int, sign: int, what: str) -> None:
        if not 0 <= amount <= MBARRIER_TX_LIMIT:
            raise ValueError(f"mbarrier {what} count must be in [0, {MBARRIER_TX_LIMIT}], got {amount}")
        tx = self.tx_count + sign * amount
        if abs(tx) > MBARRIER_TX_LIMIT:
            raise ValueError(f"mbarrier {what} takes tx-count to {tx}, outside +-{MBARRIER_TX_LIMIT}")
        self.tx_count = tx

    def _complete_if_done(self) -> None:
        if self.pending == 0 and self.tx_count == 0:
            self.phase += 1
            self.pending = self.expected

    def _check_initialised(self) -> None:
        if self.expected == 0:
            raise ValueError("mbarrier used before mbarrier.init")

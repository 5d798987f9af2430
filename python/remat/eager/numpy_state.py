"""NumPy's global (legacy) RNG state, read and put back cheaply where that is exact.

``numpy.random.get_state()`` and ``set_state()`` take about 30 us each, and remat's replay reads
the state around every measuring run and checkpoint region (see generators.py): about half of
what a region costs beyond torch's own checkpoint (bench/results/zoo/overhead_cpu.md).

The legacy state is the MT19937 key and position, and a cached Gaussian (has_gauss, gauss).
Reading the key and position straight from the bit generator's C struct takes under 1 us. When
they are the bytes of the last state read in full, and that state had no cached Gaussian, the
whole state is still that one: every draw but one moves the key or the position, and the
exception (returning a cached Gaussian) needs has_gauss = 1, which only a draw that moves them
can set. So ``snapshot()`` returns the last full state then, and ``restore()`` skips putting back
a state that is already there. (The one way around it, code between two reads that calls
``set_state`` with a state of the same key and position and a cached Gaussian, is not one that
replays a block.) Where the struct cannot be read and checked against ``get_state()`` (another
bit generator, another layout), every read is a full one.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

_KEY_WORDS = 624  # MT19937's key, uint32 words, followed by its int position
_RAW_BYTES = 4 * _KEY_WORDS + 4


class NumpyState:
    """The state of ``numpy.random``'s global RandomState."""

    def __init__(self) -> None:
        self._bit_generator: Any = None  # the one the address below belongs to
        self._address: int | None = None
        self._raw: bytes | None = None  # the struct's bytes when `_state` was read in full
        self._state: Any = None
        self.full_reads = 0  # full get_state() calls (tests check the fast path is taken)

    def snapshot(self) -> Any:
        """The state as ``numpy.random.get_state()`` returns it (None without NumPy)."""
        numpy = sys.modules.get("numpy")
        if numpy is None:
            return None
        raw = self._read(numpy)
        if raw is not None and raw == self._raw and self._state[3] == 0:
            return self._state
        state = numpy.random.get_state()
        self.full_reads += 1
        if raw is not None:
            self._raw, self._state = raw, state
        return state

    def restore(self, state: Any) -> None:
        """Puts `state` (from ``snapshot``) back, unless it is there already."""
        numpy = sys.modules.get("numpy")
        if numpy is None or state is None:
            return
        if state is self._state and state[3] == 0 and self._read(numpy) == self._raw:
            return
        numpy.random.set_state(state)

    def _read(self, numpy: Any) -> bytes | None:
        """The key and position's bytes, or None where they cannot be read safely."""
        try:
            bit_generator = numpy.random.mtrand._rand._bit_generator
        except AttributeError:
            return None
        if bit_generator is not self._bit_generator:
            self._bit_generator = bit_generator
            self._address = self._checked_address(numpy, bit_generator)
            self._raw = self._state = None
        if self._address is None:
            return None
        return ctypes.string_at(self._address, _RAW_BYTES)

    @staticmethod
    def _checked_address(numpy: Any, bit_generator: Any) -> int | None:
        """The address of an MT19937 state struct laid out as key then position, checked
        against ``get_state()``; None for anything else."""
        if type(bit_generator).__name__ != "MT19937":
            return None
        try:
            address = int(bit_generator.ctypes.state_address)
        except (AttributeError, TypeError, ValueError):
            return None
        raw = ctypes.string_at(address, _RAW_BYTES)
        _, key, position, *_ = numpy.random.get_state()
        found = numpy.frombuffer(raw[: 4 * _KEY_WORDS], dtype=numpy.uint32)
        position_found = int.from_bytes(raw[4 * _KEY_WORDS :], sys.byteorder, signed=True)
        if not numpy.array_equal(found, key) or position_found != int(position):
            return None
        return address


NUMPY_STATE = NumpyState()

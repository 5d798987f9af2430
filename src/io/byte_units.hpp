// Byte counts as users write them on the command line: "2147483648", "30MB", "1.5 GiB". The same
// grammar and arithmetic as the Python package's remat.units.parse_bytes, so a budget means the
// same bytes to `remat eager --budget` and to remat.torch.plan(memory_budget=...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace remat::io {

// A number (digits, an optional fraction, an optional exponent; no sign) and an optional unit,
// case-insensitive, with optional whitespace around and between: B, KB/MB/GB/TB (powers of 1000),
// KiB/MiB/GiB/TiB (powers of 1024). The value is the written decimal times the unit, exactly,
// rounded down to whole bytes. Throws InputError(field) for text it cannot read or a value of 2^62
// bytes or more.
std::int64_t parse_bytes(std::string_view text, const std::string& field);

}  // namespace remat::io

// Exact path for knapsacks whose runtime is one affine function of weight up to a few intercepts:
// v_i = (num w_i + b_g(i)) / den for a slope num / den > 0 and at most kMaxGroups intercepts b_g,
// every v_i integral. Pisinger's strongly correlated (one group), subset sum (one, b = 0),
// inverse strongly correlated (one, b < 0) and multiple strongly correlated classes (two:
// mstr(k1, k2, d) adds k1 to the weight where d divides it, else k2) are of this form. The
// expanding core finds these hard when the intercepts are large: within one count of items per
// group, every plan's value is its weight plus a constant, so no state dominates another and the
// list holds every reachable weight near the budget (mstr, R = 10^7: 9e6 states, then the cap).
//
// Here the plans are split by their count vector k (k_g items of group g). With k fixed,
// den value(S) = sum_g b_g k_g + num W(S), so the best plan of that vector is the heaviest within
// the budget C, and no plan of it is worth more than
//   U(k) = sum_g b_g k_g + num min(C, the k_g heaviest of every group),
// nor fits unless M(k), the k_g lightest of every group, is at most C. The vectors with U(k) above
// the incumbent are listed (for each count of the first group the second's counts that qualify
// form one interval, found by binary search: U is the least of a part increasing with the count
// and a part monotone in it) and solved best bound first, until the bound is no better than the
// incumbent, which is then optimal.
//
// One vector: a plan S of counts k differs from the lightest plan M by swaps, in each group g as
// many members out of M as non-members in. With beta_g the heaviest member of g,
//   W(S) - W(M) = sum over outs of (beta_g - w) + sum over ins of (w - beta_g),
// every term nonnegative, and W(S) <= C bounds the sum by the slack s = C - W(M). So only items
// within s of beta_g take part, at most q_g swaps fit (the q_g cheapest outs and ins together
// within s), and the reachable increases form a bit set over [0, s]: a 0/1 program over the
// items, layered by outs not yet matched (0 .. q_g), group after group, each group starting from
// what the last one reached with every out matched. The heaviest plan is the highest bit
// reached. A vector that beats the incumbent has its program run again at once, recording for
// each bit the move that first set it, which gives the plan (each bit's first setter comes after
// its predecessor's). Before any program, a vector whose heaviest plan fits, or whose lightest
// plan one swap fills to the unit, meets its bound at once: on dense weights (n = 10^5) that is
// almost always so, where the program would take billions of word operations.
//
// Weights with a common divisor D are counted in units of D (the budget rounded down), which
// divides every slack by D and lets a plan fill the budget to the unit.
//
// Time: O(n log n) to find the structure and sort the groups, O(n log n + V log V) to list V
// vectors, and per vector solved O(sum_g (outs_g + ins_g) q_g s / 64) word operations. Memory:
// the vectors (40 bytes each), (q_g + 1) bit sets of s + 1 bits, and for the plan 4 bytes per
// (layer, bit) of every group. The path gives up (the expanding core goes on) when it finds no
// such structure, when more than limits.max_vectors vectors qualify, or before a vector whose
// program would pass the work or memory left to it: it is meant for slacks of up to millions,
// which the vectors near the LP optimum have when the intercepts are large against the spacing of
// the weights. Exact: integer arithmetic (128 bits) throughout; the deadline is read between
// vectors, between the moves of a program and every 1024 one-swap lookups, and a deadline
// returns the incumbent with the best bound of the vectors not yet solved.
//
// Sources: the count-vector split is the cardinality-constraint idea of Martello, Pisinger and
// Toth (combo, 1999) taken per group; the bit-set program over balanced swaps is written here
// (the nonnegative decomposition around beta_g is what keeps it within the slack).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include "knapsack/offset_structure.hpp"
#include "knapsack/reduced_problem.hpp"
#include "remat/errors.hpp"

namespace remat::detail {

namespace {

using offset_groups::find_structure;
using offset_groups::Group;
using offset_groups::Int128;
using offset_groups::kMaxGroups;
using offset_groups::Slope;
using offset_groups::Structure;
// A binary search over a group's weights, in the word operations of the program (about 0.5 ns
// each): a few dozen cache misses at n = 10^5.
constexpr double kLookupWork = 64;

struct Vector {
  Int128 bound;  // U(k)
  std::size_t count[kMaxGroups];
};

// One group's swaps against its lightest plan of `count` items within slack s.
struct Swaps {
  std::vector<std::int64_t> outs, ins;  // increases, ascending
  std::size_t most = 0;                 // swaps that can fit
};

Swaps swaps_of(const Group& g, std::size_t count, std::int64_t slack) {
  Swaps w;
  if (count == 0 || count == g.size()) return w;
  const std::int64_t beta = g.weight[count - 1];
  for (std::size_t j = count; j-- > 0 && beta - g.weight[j] <= slack;) {
    w.outs.push_back(beta - g.weight[j]);
  }
  for (std::size_t i = count; i < g.size() && g.weight[i] - beta <= slack; ++i) {
    w.ins.push_back(g.weight[i] - beta);
  }
  std::int64_t used = 0;
  while (w.most < std::min(w.outs.size(), w.ins.size()) &&
         used + w.outs[w.most] + w.ins[w.most] <= slack) {
    used += w.outs[w.most] + w.ins[w.most];
    ++w.most;
  }
  if (w.most == 0) w.outs.clear(), w.ins.clear();
  return w;
}

// Bit sets over [0, slack], one per layer (outs not yet matched).
class Layers {
 public:
  Layers(std::size_t layers, std::int64_t slack)
      : words_(static_cast<std::size_t>(slack / 64) + 1),
        top_mask_(slack % 64 == 63 ? ~std::uint64_t{0}
                                   : (std::uint64_t{1} << (slack % 64 + 1)) - 1),
        bits_(layers * words_, 0) {}

  std::size_t words() const { return words_; }
  std::uint64_t* layer(std::size_t q) { return bits_.data() + q * words_; }
  void clear_above(std::size_t q) {
    std::fill(bits_.begin() + static_cast<std::ptrdiff_t>((q + 1) * words_), bits_.end(), 0);
  }
  // dst |= src << shift within [0, slack]; `on_new(word, bits)` sees each word's new bits.
  template <class OnNew>
  void shift_or(std::uint64_t* dst, const std::uint64_t* src, std::int64_t shift,
                const OnNew& on_new) {
    const auto word_shift = static_cast<std::size_t>(shift / 64);
    const auto bit_shift = static_cast<unsigned>(shift % 64);
    if (word_shift >= words_) return;
    for (std::size_t i = words_; i-- > word_shift;) {
      const std::size_t from = i - word_shift;
      std::uint64_t moved = src[from] << bit_shift;
      if (bit_shift != 0 && from > 0) moved |= src[from - 1] >> (64 - bit_shift);
      if (i == words_ - 1) moved &= top_mask_;
      on_new(i, moved & ~dst[i]);
      dst[i] |= moved;
    }
  }
  // The highest bit of layer 0.
  std::int64_t highest() const {
    for (std::size_t i = words_; i-- > 0;) {
      if (bits_[i]) return static_cast<std::int64_t>(i * 64 + 63 - __builtin_clzll(bits_[i]));
    }
    return -1;
  }

 private:
  std::size_t words_;
  std::uint64_t top_mask_;
  std::vector<std::uint64_t> bits_;
};

// Holds `bytes` of planner memory for its lifetime (reserve throws PlannerMemoryError).
class Reservation {
 public:
  Reservation(PlannerMemory& memory, std::size_t bytes) : memory_(memory), bytes_(bytes) {
    memory_.reserve(bytes_);
  }
  ~Reservation() { memory_.release(bytes_); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  PlannerMemory& memory_;
  std::size_t bytes_;
};

// The first index in [lo, hi) where `pred` holds (it holds from some index on), or hi.
template <class Pred>
std::size_t first_true(std::size_t lo, std::size_t hi, const Pred& pred) {
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (pred(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

std::size_t words_for(std::int64_t slack) {
  return static_cast<std::size_t>(slack / 64) + 1;
}

// Per (layer, bit) of a group's program, the move that first set the bit (0: set before it).
using Record = std::unique_ptr<std::uint32_t[]>;

// What the records of a vector's program take, every group's together.
std::size_t record_bytes(const std::vector<Swaps>& swaps, std::int64_t slack) {
  std::size_t bytes = 0;
  for (const Swaps& w : swaps) {
    if (w.most > 0) bytes += (w.most + 1) * words_for(slack) * 64 * sizeof(std::uint32_t);
  }
  return bytes;
}

// A move of the program: one out or in of a group, for rebuilding the plan.
struct Move {
  std::size_t group;
  bool out;
  std::size_t rank;  // among the group's outs (or ins), by increase
  std::int64_t increase;
};

class Search {
 public:
  // `capacity` in the structure's units of weight.
  Search(const ReducedProblem& p, Structure s, std::int64_t capacity, PlannerMemory& memory,
         std::optional<Clock::time_point> deadline, const OffsetGroupLimits& limits)
      : p_(p),
        s_(std::move(s)),
        capacity_(capacity),
        memory_(memory),
        deadline_(deadline),
        limits_(limits) {}

  OffsetGroupsOutcome run(double incumbent) {
    OffsetGroupsOutcome out;
    out.status = OffsetGroupsOutcome::kGaveUp;
    out.best_value = incumbent;
    best_ = static_cast<Int128>(s_.slope.den) * static_cast<Int128>(incumbent);
    std::vector<Vector> vectors;
    std::optional<Reservation> held;
    if (!list_vectors(vectors, held)) return out;  // kGaveUp
    // Best bound first; among equal bounds the least slack first (subset sum: every count that
    // can fill the budget has the bound C), whose program is the smallest and whose one-swap
    // fill is the likeliest. Ties past that by counts, so the order is the same on every library.
    std::sort(vectors.begin(), vectors.end(), [&](const Vector& a, const Vector& b) {
      if (a.bound != b.bound) return a.bound > b.bound;
      const std::int64_t la = lightest(a), lb = lightest(b);
      if (la != lb) return la > lb;
      return std::lexicographical_compare(a.count, a.count + kMaxGroups, b.count,
                                          b.count + kMaxGroups);
    });
    out.vectors = vectors.size();
    double work_left = limits_.max_work;
    for (const Vector& vec : vectors) {
      if (vec.bound <= best_) break;
      // At the deadline, every vector left (this one included) is bounded by this one's U, which
      // is above the incumbent: a valid bound on every plan.
      const auto at_deadline = [&] {
        out.status = OffsetGroupsOutcome::kDeadline;
        out.upper_bound = static_cast<double>(vec.bound) / static_cast<double>(s_.slope.den);
        return out;
      };
      if (past_deadline()) return at_deadline();
      const std::int64_t slack = capacity_ - lightest(vec);
      const auto value = [&](std::int64_t add) {
        return base(vec) +
               static_cast<Int128>(s_.slope.num) * static_cast<Int128>(lightest(vec) + add);
      };
      std::int64_t increase = 0;
      std::optional<std::vector<char>> plan = fill(vec, slack, increase, work_left);
      if (work_left < 0) return out;  // kGaveUp
      if (!plan && past_deadline()) return at_deadline();
      if (plan) {
        ++out.filled;
      } else {
        std::vector<Swaps> swaps;
        double work = 0;
        for (std::size_t g = 0; g < kMaxGroups; ++g) {
          swaps.push_back(swaps_of(s_.groups[g], vec.count[g], slack));
          const Swaps& w = swaps.back();
          work += static_cast<double>(w.outs.size() + w.ins.size()) *
                  (static_cast<double>(w.most) * static_cast<double>(words_for(slack)) + 1);
        }
        if (work > work_left ||
            static_cast<double>(record_bytes(swaps, slack)) > limits_.max_bytes) {
          return out;  // kGaveUp
        }
        work_left -= work;
        const std::optional<std::int64_t> reached = heaviest_increase(slack, swaps, nullptr);
        if (reached) {
          ++out.solved;
          if (value(*reached) <= best_) continue;
          increase = *reached;
          // A better plan is rebuilt at once, so that a deadline later still leaves it.
          plan = plan_of(vec, slack, swaps, increase);
        }
        if (!plan) return at_deadline();
      }
      if (value(increase) <= best_) continue;
      best_ = value(increase);
      out.take = std::move(*plan);
      out.best_value = 0;
      for (std::size_t i = 0; i < p_.size(); ++i) out.best_value += out.take[i] ? p_.value[i] : 0;
    }
    out.status = OffsetGroupsOutcome::kProven;
    return out;
  }

 private:
  bool past_deadline() const { return deadline_ && Clock::now() >= *deadline_; }

  // A plan of `vec` that meets its bound without the program, when an obvious one does: its
  // heaviest plan when that fits, else one swap (in one group, a member out and a non-member
  // exactly `slack` heavier in) that fills the budget to the unit. On dense weights (n = 10^5)
  // the program would take billions of word operations where one such pair almost always exists.
  // Each lookup is charged kLookupWork of `work_left`; the search stops when that runs out.
  std::optional<std::vector<char>> fill(const Vector& vec, std::int64_t slack,
                                        std::int64_t& increase, double& work_left) const {
    std::int64_t heaviest = 0;
    for (std::size_t g = 0; g < kMaxGroups; ++g) heaviest += s_.groups[g].heaviest(vec.count[g]);
    if (heaviest - lightest(vec) <= slack) {
      std::vector<char> take(p_.size(), 0);
      for (std::size_t g = 0; g < kMaxGroups; ++g) {
        const Group& group = s_.groups[g];
        for (std::size_t k = group.size() - vec.count[g]; k < group.size(); ++k) {
          take[group.items[k]] = 1;
        }
      }
      increase = heaviest - lightest(vec);
      return take;
    }
    std::size_t lookups = 0;
    for (std::size_t g = 0; g < kMaxGroups; ++g) {
      const Group& group = s_.groups[g];
      const std::size_t count = vec.count[g];
      if (count == 0 || count == group.size()) continue;
      const auto outside = group.weight.begin() + static_cast<std::ptrdiff_t>(count);
      for (std::size_t j = count; j-- > 0 && group.weight[count - 1] - group.weight[j] <= slack;) {
        work_left -= kLookupWork;
        if (work_left < 0 || (++lookups % 1024 == 0 && past_deadline())) return std::nullopt;
        const std::int64_t wanted = group.weight[j] + slack;
        const auto at = std::lower_bound(outside, group.weight.end(), wanted);
        if (at == group.weight.end() || *at != wanted) continue;
        std::vector<char> take(p_.size(), 0);
        for (std::size_t h = 0; h < kMaxGroups; ++h) {
          for (std::size_t k = 0; k < vec.count[h]; ++k) take[s_.groups[h].items[k]] = 1;
        }
        take[group.items[j]] = 0;
        take[group.items[static_cast<std::size_t>(at - group.weight.begin())]] = 1;
        increase = slack;
        return take;
      }
    }
    return std::nullopt;
  }

  Int128 base(const Vector& v) const {
    Int128 b = 0;
    for (std::size_t g = 0; g < kMaxGroups; ++g) {
      b += s_.groups[g].offset * static_cast<Int128>(v.count[g]);
    }
    return b;
  }
  std::int64_t lightest(const Vector& v) const {
    std::int64_t w = 0;
    for (std::size_t g = 0; g < kMaxGroups; ++g) w += s_.groups[g].lightest(v.count[g]);
    return w;
  }

  // Calls `visit(k0, from, to)` for each count k0 of the first group whose second group's counts
  // [from, to) fit with U(k) above the incumbent.
  template <class Visit>
  void each_vector_range(const Visit& visit) const {
    const Group& first = s_.groups[0];
    const Group& second = s_.groups[1];
    const Int128 num = s_.slope.num;
    const Int128 capacity = capacity_;
    for (std::size_t k0 = 0; k0 <= first.size() && first.lightest(k0) <= capacity_; ++k0) {
      // The second group's counts that fit: [0, fit].
      const std::int64_t room = capacity_ - first.lightest(k0);
      const auto fit = static_cast<std::size_t>(
          std::upper_bound(second.prefix.begin(), second.prefix.end(), room) -
          second.prefix.begin() - 1);
      const auto base_of = [&](std::size_t k1) { return base(Vector{0, {k0, k1}}); };
      const auto heavy = [&](std::size_t k1) {
        return static_cast<Int128>(first.heaviest(k0) + second.heaviest(k1));
      };
      // U = min(rising, flat): rising = base + num (heaviest) grows with k1 (every item is worth
      // more than 0); flat = base + num C is monotone in k1, with the second intercept's sign.
      const auto rising_above = [&](std::size_t k1) {
        return base_of(k1) + num * heavy(k1) > best_;
      };
      const auto flat_above = [&](std::size_t k1) { return base_of(k1) + num * capacity > best_; };
      std::size_t from = first_true(0, fit + 1, rising_above), to = fit + 1;
      if (second.offset >= 0) {
        from = first_true(from, to, flat_above);
      } else {
        to = first_true(from, to, [&](std::size_t k1) { return !flat_above(k1); });
      }
      if (from < to) visit(k0, from, to);
    }
  }

  // Every vector that fits with U(k) above the incumbent, held against the cap; false when
  // there are more than limits_.max_vectors.
  bool list_vectors(std::vector<Vector>& out, std::optional<Reservation>& held) const {
    std::size_t count = 0;
    each_vector_range([&](std::size_t, std::size_t from, std::size_t to) { count += to - from; });
    if (count > limits_.max_vectors) return false;
    held.emplace(memory_, count * sizeof(Vector));
    out.reserve(count);
    const Int128 num = s_.slope.num;
    each_vector_range([&](std::size_t k0, std::size_t from, std::size_t to) {
      for (std::size_t k1 = from; k1 < to; ++k1) {
        const Vector v{0, {k0, k1}};
        const std::int64_t heavy = s_.groups[0].heaviest(k0) + s_.groups[1].heaviest(k1);
        out.push_back({base(v) + num * static_cast<Int128>(std::min(capacity_, heavy)), {k0, k1}});
      }
    });
    return true;
  }

  // The most the vector's plans can add to its lightest plan's weight within `slack` (the
  // highest bit the program reaches); nullopt at the deadline. With `record`, each (group,
  // layer, bit) gets the move that first set it (1-based in `moves`).
  std::optional<std::int64_t> heaviest_increase(std::int64_t slack, const std::vector<Swaps>& swaps,
                                                std::vector<Record>* record,
                                                std::vector<Move>* moves = nullptr) {
    std::size_t layers = 1;
    for (const Swaps& w : swaps) layers = std::max(layers, w.most + 1);
    const std::size_t words = words_for(slack);
    const Reservation held(memory_, layers * words * sizeof(std::uint64_t));
    Layers bits(layers, slack);
    bits.layer(0)[0] = 1;  // the lightest plan
    for (std::size_t g = 0; g < kMaxGroups; ++g) {
      const Swaps& w = swaps[g];
      if (w.most == 0) continue;
      std::uint32_t* setter = nullptr;
      if (record) {
        // Left unwritten (zeroing up to hundreds of MB would not heed the deadline): only set
        // bits are ever read, and each gets its entry when set; those this group starts from
        // are marked as its start.
        (*record)[g].reset(new std::uint32_t[(w.most + 1) * words * 64]);
        setter = (*record)[g].get();
        for (std::size_t word = 0; word < words; ++word) {
          for (std::uint64_t set = bits.layer(0)[word]; set; set &= set - 1) {
            setter[word * 64 + static_cast<std::size_t>(__builtin_ctzll(set))] = 0;
          }
        }
      }
      const auto step = [&](std::int64_t increase, bool out, std::size_t rank) {
        if (past_deadline()) return false;
        std::uint32_t id = 0;
        if (moves) {
          moves->push_back({g, out, rank, increase});
          id = static_cast<std::uint32_t>(moves->size());
        }
        for (std::size_t k = 1; k <= w.most; ++k) {
          // An out moves layer q - 1 to q, highest q first; an in moves q to q - 1, lowest first:
          // either way each layer is read before this move writes it (0/1 per move).
          const std::size_t q = out ? w.most + 1 - k : k;
          const std::size_t dst = out ? q : q - 1, src = out ? q - 1 : q;
          const auto note = [&](std::size_t word, std::uint64_t fresh) {
            if (!setter) return;
            for (; fresh; fresh &= fresh - 1) {
              setter[(dst * words + word) * 64 + static_cast<std::size_t>(__builtin_ctzll(fresh))] =
                  id;
            }
          };
          bits.shift_or(bits.layer(dst), bits.layer(src), increase, note);
        }
        return true;
      };
      for (std::size_t r = 0; r < w.outs.size(); ++r) {
        if (!step(w.outs[r], true, r)) return std::nullopt;
      }
      for (std::size_t r = 0; r < w.ins.size(); ++r) {
        if (!step(w.ins[r], false, r)) return std::nullopt;
      }
      bits.clear_above(0);  // a group ends with every out matched
    }
    return bits.highest();
  }

  // The plan of `vec` that adds `increase` to its lightest plan, followed back through the first
  // setters; nullopt at the deadline.
  std::optional<std::vector<char>> plan_of(const Vector& vec, std::int64_t slack,
                                           const std::vector<Swaps>& swaps, std::int64_t increase) {
    const std::size_t words = words_for(slack);
    const Reservation held(memory_, record_bytes(swaps, slack));
    std::vector<Record> record(kMaxGroups);
    std::vector<Move> moves;
    if (!heaviest_increase(slack, swaps, &record, &moves)) return std::nullopt;
    std::vector<char> take(p_.size(), 0);
    for (std::size_t g = 0; g < kMaxGroups; ++g) {
      for (std::size_t k = 0; k < vec.count[g]; ++k) take[s_.groups[g].items[k]] = 1;
    }
    std::int64_t at = increase;
    std::size_t q = 0;
    for (std::size_t g = kMaxGroups; g-- > 0;) {
      if (swaps[g].most == 0) continue;
      while (const std::uint32_t id = record[g][(q * words) * 64 + static_cast<std::size_t>(at)]) {
        const Move& m = moves[id - 1];
        const Group& group = s_.groups[m.group];
        if (m.out) {
          take[group.items[vec.count[g] - 1 - m.rank]] = 0;
          --q;
        } else {
          take[group.items[vec.count[g] + m.rank]] = 1;
          ++q;
        }
        at -= m.increase;
      }
    }
    if (at != 0 || q != 0) throw std::logic_error("offset_groups: the plan does not rebuild");
    return take;
  }

  const ReducedProblem& p_;  // its values and size (weights are the structure's)
  Structure s_;
  std::int64_t capacity_;
  PlannerMemory& memory_;
  std::optional<Clock::time_point> deadline_;
  OffsetGroupLimits limits_;
  Int128 best_ = 0;  // den times the incumbent's value
};

}  // namespace

OffsetGroupsOutcome offset_groups_search(const ReducedProblem& p, double incumbent,
                                         PlannerMemory& memory,
                                         std::optional<Clock::time_point> deadline,
                                         const OffsetGroupLimits& limits) {
  // Weights with a common divisor D (sizes in whole pages, say) are counted in units of D, the
  // budget rounded down to one: the same plans fit, every slack is D times smaller, and a budget
  // that no plan fills to the byte is filled to the unit instead.
  std::int64_t divisor = 0;
  for (std::int64_t w : p.weight) divisor = std::gcd(divisor, w);
  divisor = std::max<std::int64_t>(divisor, 1);
  std::optional<Structure> s = find_structure(p, divisor);
  if (!s) return {};
  const std::size_t groups = static_cast<std::size_t>(
      std::count_if(s->groups.begin(), s->groups.end(), [](const Group& g) { return g.size(); }));
  OffsetGroupsOutcome out;
  try {
    const Reservation held(memory, p.size() * (sizeof(std::uint32_t) + 2 * sizeof(std::int64_t)));
    out = Search(p, std::move(*s), p.capacity / divisor, memory, deadline, limits).run(incumbent);
  } catch (const PlannerMemoryError&) {
    // What it needs passes the cap: leave the instance to the core (nothing is held now).
    out = OffsetGroupsOutcome{};
    out.status = OffsetGroupsOutcome::kGaveUp;
  }
  out.groups = groups;
  return out;
}

}  // namespace remat::detail

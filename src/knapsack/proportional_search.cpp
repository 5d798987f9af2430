// Exact search for small near-proportional instances (runtime about a fixed multiple of the
// quantized weight, as when runtime is proportional to memory): meet in the middle over flip sets
// of bounded loss, with iterative deepening on the loss. Horowitz and Sahni 1974 ("Computing
// partitions with applications to the knapsack problem", JACM 21(2)) for the two sorted halves;
// the loss decomposition is the Lagrangian (LP-dual) view of Dantzig's bound.
//
// Let rho be the efficiency of the break item, the LP dual price of the budget, and
// d_i = v_i - rho w_i. For every plan S within the budget C,
//   value(S) = rho C + D - gap(S),  gap(S) = rho (C - w(S)) + sum over F of |d_i|,
// where D is the sum of the positive d_i (so rho C + D is Dantzig's bound) and F = S xor P is the
// set of flips against P = {i : d_i > 0}. Both parts of the gap are nonnegative, so a plan with
// gap below U is a pair of flip sets, one per half of the items (split alternately by loss), both
// of loss below U and one of them below U / 2. One round lists each half's light flip sets (loss
// below U / 2) and sorts them by signed weight, with a bucket index for O(1) expected lookups,
// then streams every flip set of loss below U of the other half (depth first over the half's
// items by ascending loss, so the listing is output-sensitive and nothing of it is stored) against
// them: the partners whose weight keeps the plan within budget with a slack cost below the gap
// still allowed are a short scan down from the lookup. A round that finds a plan of gap below U
// has found the optimum; otherwise U grows by 1.25 (from a quarter quantum) up to the incumbent's
// gap, less the runtimes' step when they are integral: a round at that U that finds nothing
// better proves the incumbent optimal. Without near-proportional structure the listings grow
// fast, and the search gives up (see the caps below), leaving the instance to the core.
//
// Time: per round O(S log S) for the S stored entries (the sort) plus O(L) for the L streamed
// ones; memory 24 bytes a stored entry, at most 2 x 2^19 of them, and 4 bytes an entry for the
// index, reserved against the planner-memory cap. n <= 64 (a half's flip set is a 32-bit mask).
// The deadline is read every 2^14 listed entries and after each sort. Double rounding in d_i is
// the only inexactness (relative 1e-16 of the runtimes); candidates within that of the best are
// compared by their summed runtimes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "knapsack/reduced_problem.hpp"
#include "remat/errors.hpp"

namespace remat::detail {

namespace {

struct Flips {
  std::int64_t weight;  // signed change of weight against P
  double loss;          // sum of |d_i| over the flips
  std::uint32_t mask;   // flips, as bits of the half's item list
};

struct Half {
  std::vector<std::uint32_t> items;  // reduced indices, ascending loss
  std::vector<std::int64_t> dw;      // signed weight of flipping each
  std::vector<double> loss;
};

constexpr std::size_t kMaxEntries = std::size_t{1} << 19;   // stored, a half
constexpr std::size_t kMaxStreamed = std::size_t{1} << 23;  // streamed, a half
constexpr std::size_t kMaxStreamedIntegral = std::size_t{1} << 19;
constexpr std::size_t kStepsPerClockRead = 1 << 14;
// A round that would surely list more than 2^17 light or 2^21 streamed flip sets a half is not
// started: the core enumeration or the core's own search does better there.
constexpr std::size_t kMaxSurelyStoredLog2 = 17;
constexpr std::size_t kMaxSurelyStreamedLog2 = 21;

// upper_bound by weight on a list sorted by weight, in O(1) expected: the weights' range is cut
// into as many equal buckets as entries, and each bucket's first entry is kept.
class WeightIndex {
 public:
  void build(const std::vector<Flips>& sorted, PlannerMemory& memory, std::size_t& reserved) {
    size_ = sorted.size();
    if (size_ == 0) return;
    lo_ = sorted.front().weight;
    hi_ = sorted.back().weight;
    const std::size_t buckets = size_;
    width_ = (hi_ - lo_) / static_cast<std::int64_t>(buckets) + 1;
    if (start_.capacity() < buckets + 1) {
      const std::size_t bytes = (buckets + 1 - start_.capacity()) * sizeof(std::uint32_t);
      memory.reserve(bytes);
      reserved += bytes;
    }
    start_.assign(buckets + 1, 0);
    weights_ = &sorted;
    std::size_t pos = 0;
    for (std::size_t k = 0; k <= buckets; ++k) {
      const std::int64_t from = lo_ + static_cast<std::int64_t>(k) * width_;
      while (pos < size_ && sorted[pos].weight < from) ++pos;
      start_[k] = static_cast<std::uint32_t>(pos);
    }
  }

  // The number of entries of weight <= w.
  std::size_t upper_bound(std::int64_t w) const {
    if (size_ == 0 || w < lo_) return 0;
    if (w >= hi_) return size_;
    const auto k = static_cast<std::size_t>((w - lo_) / width_);
    std::size_t pos = start_[k];
    const std::size_t end = start_[k + 1];
    while (pos < end && (*weights_)[pos].weight <= w) ++pos;
    return pos;
  }

 private:
  std::size_t size_ = 0;
  std::int64_t lo_ = 0, hi_ = 0, width_ = 1;
  std::vector<std::uint32_t> start_;
  const std::vector<Flips>* weights_ = nullptr;
};

class Search {
 public:
  Search(const ReducedProblem& p, PlannerMemory& memory, std::optional<Clock::time_point> deadline)
      : p_(p), memory_(memory), deadline_(deadline) {}
  ~Search() { memory_.release(reserved_); }
  Search(const Search&) = delete;
  Search& operator=(const Search&) = delete;

  // With integral runtimes that are multiples of `step` (0 otherwise), a better plan gains at
  // least `step`.
  ProportionalOutcome run(double incumbent, double step) {
    ProportionalOutcome out;
    setup();
    // Integral runtimes have the core's divisibility and cardinality tools: a smaller budget of
    // work here before giving up.
    if (step > 0) max_streamed_ = kMaxStreamedIntegral;
    // A better plan has a gap at most `target` (the tolerance covers rounding in the gaps).
    const double target = bound_ - incumbent - step +
                          (step > 0 ? 1e-12 * (std::abs(bound_) + std::abs(incumbent) + 1) : 0.0);
    if (!(target > 0)) {
      out.status = ProportionalOutcome::kProven;  // nothing beats the incumbent
      out.upper_bound = step > 0 ? incumbent : bound_;
      out.best_value = incumbent;
      return out;
    }
    out.upper_bound = bound_;
    double u = std::min(target, 0.25 * rho_ + min_positive_loss());
    best_value_ = incumbent;
    std::size_t previous_listed = 0;
    while (true) {
      listed_ = 0;
      // A hair of slack so that rounding in the gaps cannot hide a plan from the round; the
      // candidates are then compared by their summed runtimes.
      const bool last = u >= target;
      const double cap = u * (1 + 1e-9) + 1e-300;
      const Outcome o = round(cap);
      if (o == Outcome::kTooLarge) {
        out.status = ProportionalOutcome::kGaveUp;
        break;
      }
      if (o == Outcome::kDeadline) {
        out.status = ProportionalOutcome::kDeadline;
        break;
      }
      if (found_ || last) {
        out.status = ProportionalOutcome::kProven;
        out.upper_bound = best_value_;
        break;
      }
      out.upper_bound = bound_ - u;  // no plan has a gap below u
      u = std::min(target, 1.25 * u);
      // The listings grow about geometrically from round to round: give up before a round that
      // would pass the cap anyway.
      const double predicted = static_cast<double>(listed_) * static_cast<double>(listed_) /
                               static_cast<double>(std::max<std::size_t>(previous_listed, 1));
      if (previous_listed > 0 && predicted > 2.0 * static_cast<double>(max_streamed_)) {
        out.status = ProportionalOutcome::kGaveUp;
        break;
      }
      previous_listed = listed_;
    }
    if (found_) out.take = best_take_;
    out.best_value = best_value_;
    return out;
  }

 private:
  enum class Outcome { kDone, kTooLarge, kDeadline };

  void setup() {
    const std::size_t n = p_.size();
    const std::vector<std::uint32_t> order = order_by_efficiency(p_);
    std::int64_t w = 0;
    std::size_t b = 0;
    while (b < n && w + p_.weight[order[b]] <= p_.capacity) w += p_.weight[order[b++]];
    const std::uint32_t brk = order[std::min(b, n - 1)];
    rho_ = p_.value[brk] / static_cast<double>(p_.weight[brk]);
    base_take_.assign(n, 0);
    std::vector<std::uint32_t> by_loss(n);
    std::vector<double> d(n);
    double positive = 0;
    base_weight_ = 0;
    for (std::size_t i = 0; i < n; ++i) {
      d[i] = p_.value[i] - rho_ * static_cast<double>(p_.weight[i]);
      if (d[i] > 0) {
        base_take_[i] = 1;
        positive += d[i];
        base_weight_ += p_.weight[i];
      }
    }
    bound_ = rho_ * static_cast<double>(p_.capacity) + positive;
    target_ = p_.capacity - base_weight_;
    std::iota(by_loss.begin(), by_loss.end(), 0u);
    std::stable_sort(by_loss.begin(), by_loss.end(), [&](std::uint32_t a, std::uint32_t c) {
      return std::abs(d[a]) < std::abs(d[c]);
    });
    for (std::size_t r = 0; r < n; ++r) {
      const std::uint32_t i = by_loss[r];
      Half& h = half_[r % 2];
      h.items.push_back(i);
      h.dw.push_back(base_take_[i] ? -p_.weight[i] : p_.weight[i]);
      h.loss.push_back(std::abs(d[i]));
    }
  }

  double min_positive_loss() const {
    double m = std::numeric_limits<double>::infinity();
    for (const Half& h : half_) {
      for (double l : h.loss) {
        if (l > 0) m = std::min(m, l);
      }
    }
    return std::isfinite(m) ? m : 0.0;
  }

  bool past_deadline() {
    if (!deadline_) return false;
    if (--until_clock_ > 0) return false;
    until_clock_ = kStepsPerClockRead;
    return Clock::now() >= *deadline_;
  }

  void ensure(std::vector<Flips>& v, std::size_t needed) {
    if (v.capacity() >= needed) return;
    const std::size_t target = std::min(kMaxEntries, std::max(needed, 2 * v.capacity()));
    const std::size_t bytes = (target - v.capacity()) * sizeof(Flips);
    memory_.reserve(bytes);
    reserved_ += bytes;
    v.reserve(target);
  }

  // Every flip set of the half with loss below `cap` (and below the best gap found so far),
  // depth first by ascending loss, handed to `visit`; at most `max_entries` of them.
  template <typename Visit>
  Outcome list(const Half& h, double cap, std::size_t max_entries, Visit&& visit) {
    stack_.assign(1, {0, 0, 0.0, 0});
    std::size_t listed = 0;
    while (!stack_.empty()) {
      const Frame f = stack_.back();
      stack_.pop_back();
      if (++listed > max_entries) return Outcome::kTooLarge;
      ++listed_;
      if (past_deadline()) return Outcome::kDeadline;
      visit(Flips{f.weight, f.loss, f.mask});
      const double limit = std::min(cap, best_gap_ * (1 + 1e-9) + 1e-300);
      for (std::size_t j = f.next; j < h.items.size(); ++j) {
        const double l = f.loss + h.loss[j];
        if (l >= limit) break;  // ascending losses: so are all later ones
        stack_.push_back({j + 1, f.weight + h.dw[j], l, f.mask | (std::uint32_t{1} << j)});
      }
    }
    return Outcome::kDone;
  }

  // The half's flip sets of loss below `cap`, sorted by signed weight.
  Outcome sorted_list(const Half& h, double cap, std::vector<Flips>& out) {
    out.clear();
    const Outcome o = list(h, cap, kMaxEntries, [&](const Flips& f) {
      ensure(out, out.size() + 1);
      out.push_back(f);
    });
    if (o != Outcome::kDone) return o;
    // The sort is not interrupted: at most 2^19 entries, some tens of milliseconds.
    std::sort(out.begin(), out.end(), [](const Flips& x, const Flips& y) {
      return x.weight < y.weight || (x.weight == y.weight && x.loss < y.loss);
    });
    return deadline_ && Clock::now() >= *deadline_ ? Outcome::kDeadline : Outcome::kDone;
  }

  // Pairs one flip set of a half with those of the other half (sorted) that keep the plan in
  // budget with a gap below the best so far.
  void pair(const Flips& x, const std::vector<Flips>& other, const WeightIndex& index,
            bool x_first) {
    const double allowed = best_gap_ * (1 + 1e-9) - x.loss;  // for the other's loss and slack
    if (allowed < 0) return;
    const std::int64_t hi = target_ - x.weight;  // other.weight <= hi keeps the plan in budget
    auto it = other.begin() + static_cast<std::ptrdiff_t>(index.upper_bound(hi));
    while (it != other.begin()) {
      --it;
      const double slack_cost = rho_ * static_cast<double>(hi - it->weight);
      if (slack_cost > allowed) break;
      const double gap = x.loss + it->loss + slack_cost;
      if (gap < best_gap_ * (1 + 1e-9) + 1e-300) {
        consider(x_first ? x.mask : it->mask, x_first ? it->mask : x.mask, gap);
      }
    }
  }

  std::vector<char> take_of(std::uint32_t mask_a, std::uint32_t mask_b) const {
    std::vector<char> take = base_take_;
    for (std::size_t j = 0; j < half_[0].items.size(); ++j) {
      if (mask_a >> j & 1) take[half_[0].items[j]] ^= 1;
    }
    for (std::size_t j = 0; j < half_[1].items.size(); ++j) {
      if (mask_b >> j & 1) take[half_[1].items[j]] ^= 1;
    }
    return take;
  }

  void consider(std::uint32_t mask_a, std::uint32_t mask_b, double gap) {
    if (gap > best_gap_ * (1 + 1e-9) + 1e-300) return;
    std::vector<char> take = take_of(mask_a, mask_b);
    double value = 0;
    std::int64_t weight = 0;
    for (std::size_t i = 0; i < take.size(); ++i) {
      if (take[i]) {
        value += p_.value[i];
        weight += p_.weight[i];
      }
    }
    if (weight > p_.capacity || value <= best_value_) return;
    best_value_ = value;
    best_gap_ = std::min(best_gap_, gap);
    best_take_ = std::move(take);
    found_ = true;
  }

  // Every plan with gap below `cap` has a half whose flips lose at most cap / 2: each half's
  // flip sets are streamed against the other half's light ones (sorted), so only those are
  // stored.
  // At least 2^k flip sets of the half lose less than `cap`, for the k lightest items whose
  // losses sum below it (all k of them when the losses are zero, as with runtime exactly
  // proportional to weight): returns k.
  static std::size_t surely_listed_log2(const Half& h, double cap) {
    double sum = 0;
    std::size_t k = 0;
    while (k < h.loss.size() && sum + h.loss[k] < cap) sum += h.loss[k++];
    return k;
  }

  Outcome round(double cap) {
    best_gap_ = cap;
    const double light = 0.5 * cap * (1 + 1e-9) + 1e-300;
    // Not near-proportional at this gap: the listings would be too long to pay.
    for (const Half& h : half_) {
      if (surely_listed_log2(h, light) > kMaxSurelyStoredLog2 ||
          surely_listed_log2(h, cap) > kMaxSurelyStreamedLog2) {
        return Outcome::kTooLarge;
      }
    }
    Outcome o = sorted_list(half_[0], light, a_);
    if (o != Outcome::kDone) return o;
    o = sorted_list(half_[1], light, b_);
    if (o != Outcome::kDone) return o;
    a_index_.build(a_, memory_, reserved_);
    b_index_.build(b_, memory_, reserved_);
    o = list(half_[0], cap, max_streamed_, [&](const Flips& f) { pair(f, b_, b_index_, true); });
    if (o != Outcome::kDone) return o;
    return list(half_[1], cap, max_streamed_,
                [&](const Flips& f) { pair(f, a_, a_index_, false); });
  }

  const ReducedProblem& p_;
  PlannerMemory& memory_;
  std::optional<Clock::time_point> deadline_;
  std::size_t reserved_ = 0;
  std::size_t until_clock_ = kStepsPerClockRead;
  double rho_ = 0, bound_ = 0;
  std::int64_t base_weight_ = 0, target_ = 0;
  std::vector<char> base_take_;
  Half half_[2];
  std::vector<Flips> a_, b_;
  WeightIndex a_index_, b_index_;
  std::size_t listed_ = 0;  // flip sets listed in the current round
  std::size_t max_streamed_ = kMaxStreamed;
  struct Frame {
    std::size_t next;
    std::int64_t weight;
    double loss;
    std::uint32_t mask;
  };
  std::vector<Frame> stack_;
  double best_gap_ = 0, best_value_ = 0;
  std::vector<char> best_take_;
  bool found_ = false;
};

}  // namespace

ProportionalOutcome proportional_search(const ReducedProblem& p, double incumbent,
                                        double value_step, PlannerMemory& memory,
                                        std::optional<Clock::time_point> deadline) {
  if (p.size() == 0 || p.size() > kProportionalMaxItems) return {};
  try {
    return Search(p, memory, deadline).run(incumbent, value_step);
  } catch (const PlannerMemoryError&) {
    return {};  // gave up: the caller's search goes on
  }
}

}  // namespace remat::detail

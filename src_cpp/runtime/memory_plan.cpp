#include "runtime/memory_plan.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace mybackend {
namespace {

constexpr int kNever = std::numeric_limits<int>::max();  // graph outputs: alive to the end

struct Liveness {
  std::vector<int> defined_at;  // -1: a graph input (or never defined)
  std::vector<int> last_read;   // the slot's release point; -1: none
  // Dead: after the last read of the value and of everything that may alias
  // it; `witness` is the value whose slot is released there.
  std::vector<int> dead_at;
  std::vector<ValueId> witness;
  std::vector<bool> foreign;  // it, or an alias of it, is read off the stream
};

Liveness liveness(const MemoryPlanInput& in) {
  const std::size_t n = in.value_count;
  Liveness l{std::vector<int>(n, -1), std::vector<int>(n, -1), {}, {}, std::vector<bool>(n, false)};
  auto check = [&](ValueId v) {
    MB_ASSERT(v >= 0 && static_cast<std::size_t>(v) < n, "memory plan: value %", v,
              " out of range");
    return static_cast<std::size_t>(v);
  };
  std::vector<std::pair<ValueId, ValueId>> aliases;  // in definition order
  for (std::size_t p = 0; p < in.points.size(); ++p) {
    const PlanPoint& point = in.points[p];
    const int at = static_cast<int>(p);
    for (ValueId v : point.reads) {
      l.last_read[check(v)] = at;
      if (!point.same_stream) l.foreign[check(v)] = true;
    }
    for (ValueId v : point.defines) {
      l.defined_at[check(v)] = at;
      l.last_read[check(v)] = std::max(l.last_read[check(v)], at);  // unused: dropped at once
    }
    for (const auto& edge : point.aliases) {
      check(edge.first), check(edge.second);
      aliases.push_back(edge);
    }
  }
  for (ValueId v : in.graph_outputs) l.last_read[check(v)] = kNever;
  l.dead_at = l.last_read;
  l.witness.resize(n);
  for (std::size_t v = 0; v < n; ++v) l.witness[v] = static_cast<ValueId>(v);
  // An alias is defined after its base: walking the edges backwards carries
  // a view's death (and its foreign reads) into every base it rests on.
  for (auto e = aliases.rbegin(); e != aliases.rend(); ++e) {
    const auto alias = static_cast<std::size_t>(e->first),
               base = static_cast<std::size_t>(e->second);
    if (l.dead_at[alias] > l.dead_at[base]) {
      l.dead_at[base] = l.dead_at[alias];
      l.witness[base] = l.witness[alias];
    }
    if (l.foreign[alias]) l.foreign[base] = true;
  }
  return l;
}

// Peak of the candidates' bytes alive at once (each from its definition to
// its death).
std::int64_t live_peak(const MemoryPlanInput& in, const Liveness& l) {
  const std::size_t points = in.points.size();
  std::vector<std::int64_t> delta(points + 1, 0);
  for (const BufferCandidate& c : in.candidates) {
    const int def = l.defined_at[static_cast<std::size_t>(c.value)];
    if (def < 0) continue;
    const int dead = l.dead_at[static_cast<std::size_t>(c.value)];
    delta[static_cast<std::size_t>(def)] += c.bytes;
    if (dead != kNever) delta[static_cast<std::size_t>(dead) + 1] -= c.bytes;
  }
  std::int64_t live = 0, peak = 0;
  for (std::int64_t d : delta) peak = std::max(peak, live += d);
  return peak;
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  const Liveness l = liveness(in);
  const std::size_t points = in.points.size();
  MemoryPlan plan;
  plan.release_after.resize(points);
  plan.hand_over_after.resize(points);
  plan.drop_after.resize(points);
  plan.buffer_of.assign(in.value_count, -1);

  for (ValueId v : in.graph_inputs) {
    const int last = l.last_read[static_cast<std::size_t>(v)];
    if (last < 0) plan.release_at_start.push_back(v);
  }
  for (std::size_t v = 0; v < in.value_count; ++v) {
    const int last = l.last_read[v];
    if (last >= 0 && last != kNever)
      plan.release_after[static_cast<std::size_t>(last)].push_back(static_cast<ValueId>(v));
  }

  // Candidates by definition point; graph outputs are none.
  std::vector<bool> is_output(in.value_count, false);
  for (ValueId v : in.graph_outputs) is_output[static_cast<std::size_t>(v)] = true;
  std::vector<std::vector<const BufferCandidate*>> defined_here(points);
  for (const BufferCandidate& c : in.candidates) {
    const auto v = static_cast<std::size_t>(c.value);
    MB_ASSERT(v < in.value_count, "memory plan: candidate %", c.value, " out of range");
    const int def = l.defined_at[v];
    if (def < 0 || is_output[v] || c.bytes <= 0) continue;
    defined_here[static_cast<std::size_t>(def)].push_back(&c);
    ++plan.planned_values;
    plan.bytes_without_reuse += c.bytes;
  }

  // Walk the points: a definition takes the most recently freed buffer of
  // its size and device; free buffers do not outlive an allocating point.
  struct Free {
    int buffer;
    int freed_at;
    ValueId from;  // the dead owner's witness: whose slot carries the storage
  };
  std::vector<Free> free;
  std::vector<std::vector<std::pair<int, ValueId>>> dying(points);  // (buffer, owner) per point
  for (std::size_t p = 0; p < points; ++p) {
    const int at = static_cast<int>(p);
    for (const BufferCandidate* c : defined_here[p]) {
      auto best = free.end();
      for (auto f = free.begin(); f != free.end(); ++f) {
        const PlannedBuffer& b = plan.buffers[static_cast<std::size_t>(f->buffer)];
        if (f->freed_at < at && b.bytes == c->bytes && b.device == c->device &&
            (best == free.end() || f->freed_at > best->freed_at))
          best = f;
      }
      int buffer;
      if (best != free.end()) {
        buffer = best->buffer;
        plan.hand_over_after[static_cast<std::size_t>(best->freed_at)].push_back(
            BufferHandOver{best->from, buffer});
        plan.drop_after[p].push_back(buffer);
        free.erase(best);
      } else {
        buffer = static_cast<int>(plan.buffers.size());
        plan.buffers.push_back(PlannedBuffer{c->bytes, c->device, {}});
        plan.bytes_with_reuse += c->bytes;
      }
      plan.buffers[static_cast<std::size_t>(buffer)].owners.push_back(c->value);
      plan.buffer_of[static_cast<std::size_t>(c->value)] = buffer;
      const auto v = static_cast<std::size_t>(c->value);
      if (l.dead_at[v] != kNever && !l.foreign[v])
        dying[static_cast<std::size_t>(l.dead_at[v])].emplace_back(buffer, c->value);
    }
    if (in.points[p].allocates) {
      free.erase(
          std::remove_if(free.begin(), free.end(), [&](const Free& f) { return f.freed_at < at; }),
          free.end());
    }
    for (const auto& [buffer, owner] : dying[p])
      free.push_back(Free{buffer, at, l.witness[static_cast<std::size_t>(owner)]});
  }
  plan.peak_bytes = live_peak(in, l);
  return plan;
}

}  // namespace mybackend

#include "xinfer/scheduler/waiting_queue.h"

#include <algorithm>
#include <vector>

#include "xinfer/core/check.h"

namespace xinfer::sched {

namespace {

// Calls f(candidate) for the first `window` group heads of the head's priority class (in importance order,
// within kMaxScan entries) until f returns false.
template <typename Set, typename F>
void for_each_candidate(const Set& set, int window, F f) {
  const int priority = (*set.begin())->request.priority;
  std::vector<uint64_t> groups;  // nonzero groups seen (few: one per client request in the window)
  int n = 0, scanned = 0;
  for (auto it = set.begin(); it != set.end() && n < window && scanned < WaitingQueue::kMaxScan; ++it, ++scanned) {
    Sequence* s = *it;
    if (s->request.priority != priority) break;
    const uint64_t g = s->request.group;
    if (g != 0) {
      if (std::find(groups.begin(), groups.end(), g) != groups.end()) continue;
      groups.push_back(g);
    }
    ++n;
    if (!f(s)) return;
  }
}

}  // namespace

Sequence* WaitingQueue::pick(int window, int max_bypass) const {
  XI_CHECK(!set_.empty());
  Sequence* head = *set_.begin();
  if (window <= 1) return head;
  Sequence* best = nullptr;
  Sequence* aged = nullptr;
  for_each_candidate(set_, window, [&](Sequence* s) {
    if (s->bypass_count >= max_bypass) {  // aged: first aged candidate in order goes next
      aged = s;
      return false;
    }
    if (best == nullptr || s->num_remaining() < best->num_remaining()) best = s;
    return true;
  });
  return aged ? aged : best;
}

void WaitingQueue::admitted(Sequence* s, int window) {
  // Candidates ahead of s were overtaken. Between groups, those behind s were passed over too (they
  // arrived later than s, but another client's batch is not theirs to wait for): after max_bypass of
  // them a group's head goes next, so clients alternate.
  bool behind = false;
  for_each_candidate(set_, window, [&](Sequence* c) {
    if (c == s) {
      behind = true;
    } else if (!behind || (s->request.group != 0 && c->request.group != 0)) {
      ++c->bypass_count;
    }
    return true;
  });
  size_t erased = set_.erase(s);
  XI_CHECK_EQ(erased, 1u) << "admitted sequence " << s->request.id << " was not waiting";
}

}  // namespace xinfer::sched

// WaitingQueue: waiting sequences in importance order (priority, then arrival), with a bounded
// shortest-first reorder window and aging.
//
// pick() looks at the first `window` candidates that share the head's priority and returns, in order of
// preference: the first candidate with bypass_count >= max_bypass (aged: it goes next), else the one with
// the fewest tokens to compute (ties: importance order). admitted(s) then adds one bypass to every
// candidate ahead of s. So a request at the front of its priority class is admitted after at most
// max_bypass later-arriving ones; priorities are strict (a lower class waits while a higher one waits).
// Candidates are group heads: of the entries sharing a nonzero Request::group only the most important
// counts (group 0: every entry is its own), so one client's batch of long prompts takes one place in the
// window and another client's request can be picked next (the scan stops after kMaxScan entries); when a
// grouped candidate is admitted, the grouped candidates behind it are charged a bypass too, so a client
// whose requests are longer still gets one in after at most max_bypass of another client's.
#pragma once

#include <cstddef>
#include <set>

#include "xinfer/scheduler/sequence.h"

namespace xinfer::sched {

class WaitingQueue {
 public:
  static constexpr int kMaxScan = 1024;  // entries pick() / admitted() look at, at most
  void push(Sequence* s) { set_.insert(s); }
  void erase(Sequence* s) { set_.erase(s); }
  bool empty() const { return set_.empty(); }
  size_t size() const { return set_.size(); }
  Sequence* front() const { return *set_.begin(); }
  auto begin() const { return set_.begin(); }
  auto end() const { return set_.end(); }

  // The next request to admit (see above). Requires !empty().
  Sequence* pick(int window, int max_bypass) const;
  // Removes s (returned by pick) and charges a bypass to the window entries it overtook.
  void admitted(Sequence* s, int window);

 private:
  std::set<Sequence*, MoreImportant> set_;
};

}  // namespace xinfer::sched

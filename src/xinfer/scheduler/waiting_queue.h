// WaitingQueue: waiting sequences in importance order (priority, then arrival), with a bounded
// shortest-first reorder window and aging.
//
// pick() looks at the first `window` entries that share the head's priority and returns, in order of
// preference: the first entry with bypass_count >= max_bypass (aged: it goes next), else the one with
// the fewest tokens to compute (ties: importance order). admitted(s) then adds one bypass to every
// window entry ahead of s. So a request at the front of its priority class is admitted after at most
// max_bypass later-arriving ones; priorities are strict (a lower class waits while a higher one waits).
#pragma once

#include <cstddef>
#include <set>

#include "xinfer/scheduler/sequence.h"

namespace xinfer::sched {

class WaitingQueue {
 public:
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

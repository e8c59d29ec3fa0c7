// The compile's launch tuning, written into the specs that read it.
//
// Note [Tuning in the specs]
// The launch tuning used to be a process-wide value read from the
// environment wherever a kernel was planned, emitted or launched, so two
// compiles could not differ in it and a test had to swap a global. It is now
// a compile option (FusionOptions::tuning): planners write the defaults, and
// this last step of plan_fusion copies the options' tuning into every
// pointwise, norm and cast-group spec (both variants, and a cast group's
// one-cast fallbacks) and their block sizes. Emitters and launchers read it
// from the spec only. A spec prints a tuning other than the defaults, so the
// source's comment block, and with it the kernel cache's key, changes with
// the tuning (Note [Spec text is the identity]).
#pragma once

#include "fusion/fusion_plan.h"
#include "spec/launch_tuning.h"

namespace mybackend {

// Does nothing when `tuning` is the defaults (the planners wrote them).
void apply_launch_tuning(FusionPlan& plan, const LaunchTuning& tuning);

}  // namespace mybackend

// File: daemon/service/stream_proto.h
//
// An opened streaming session as the wire's AttachResponse (docs/streaming.md,
// docs/protocol.md): the device resources (handles or segment names, the plan's placements by
// tensor name), the plan with its decisions, and the schedule learned before; and the
// ExplainPlan answer, the same plan without a session.
//
// Thread-safety: pure functions.
#ifndef DDO_DAEMON_SERVICE_STREAM_PROTO_H_
#define DDO_DAEMON_SERVICE_STREAM_PROTO_H_

#include "daemon/policy/plan_explainer.h"
#include "daemon/stream/stream_sessions.h"
#include "ddo/v1/sessions.pb.h"

namespace ddo {

// Fills everything of `response` but the component (ToProto of component_proto.h) and ddod's
// transfer estimate (policy). `daemon_pid` lets the runner notice ddod's death.
void ToProto(const OpenedStream& opened, int64_t daemon_pid, ddo::v1::AttachResponse* response);

// The plan's route, sizes and decisions.
void ToProto(const SessionPlan& plan, ddo::v1::PlanExplanation* out);
void ToProto(const PlanDecisionEntry& entry, ddo::v1::PlanDecision* out);
void ToProto(const PlanExplanation& plan, ddo::v1::PlanExplanation* out);

}  // namespace ddo

#endif  // DDO_DAEMON_SERVICE_STREAM_PROTO_H_

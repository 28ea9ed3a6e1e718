package server

import (
	"github.com/tetherhq/tether/server/event"
)

// The server's live events are those of package event, named here as the
// server's callers have always named them.
type (
	EventKind    = event.Kind
	Event        = event.Event
	Feed         = event.Feed
	Subscription = event.Subscription
)

// Live event kinds (see package event).
const (
	EventAgentDiscovered  = event.AgentDiscovered
	EventAgentOnline      = event.AgentOnline
	EventAgentOffline     = event.AgentOffline
	EventResult           = event.Result
	EventResults          = event.Results
	EventDeployDone       = event.DeployDone
	EventSecurity         = event.Security
	EventAgentChanged     = event.AgentChanged
	EventEnvHalted        = event.EnvHalted
	EventDrift            = event.Drift
	EventScheduled        = event.Scheduled
	EventCompileStarted   = event.CompileStarted
	EventCompileFinished  = event.CompileFinished
	EventCompileAlert     = event.CompileAlert
	EventCompileRecovered = event.CompileRecovered
	EventReleaseStarted   = event.ReleaseStarted
	EventReleaseProgress  = event.ReleaseProgress
	EventReleaseDone      = event.ReleaseDone
	EventHostState        = event.HostState
	EventInstanceChanged  = event.InstanceChanged
)

// inLog is event.InLog.
var inLog = event.InLog

// logged publishes events the transaction of what they tell appended to
// the event log (inLog), to this process's subscribers, and wakes the
// streams and webhooks that follow the log.
func (s *Server) logged(events ...Event) { s.feed.Logged(events...) }

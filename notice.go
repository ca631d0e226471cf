package forewarn

import "time"

// Notice is a maintenance event as a VM sees it through any of the
// metadata APIs, normalized by the client packages for the agent and
// other users.
type Notice struct {
	// ID is the Azure EventId; for Compute Engine a stable name of the
	// key and value that announced it; for EC2 a scheduled event's
	// EventId, or a stable name of the key that announced it.
	ID string `json:"id"`
	// Type is the Azure EventType (Freeze, Reboot, Redeploy, Preempt,
	// Terminate); for Compute Engine the maintenance-event value,
	// Preempt, or UPCOMING_MAINTENANCE; for EC2 a scheduled event's Code
	// (instance-reboot, system-reboot, system-maintenance,
	// instance-retirement, instance-stop), Preempt for a Spot
	// interruption notice, REBALANCE_RECOMMENDATION, or Terminate for an
	// Auto Scaling scale-in.
	Type string `json:"type"`
	// Status is Scheduled or Started.
	Status    string   `json:"status"`
	Resources []string `json:"resources"`
	// NotBefore is zero when unknown or, on Azure, once started. An EC2
	// scheduled event keeps its window's start once started.
	NotBefore time.Time `json:"notBefore,omitzero"`
	// Duration is the announced impact in seconds, -1 when unknown.
	Duration    int      `json:"durationInSeconds"`
	Source      string   `json:"source"`
	Description string   `json:"description"`
	Provider    Provider `json:"provider"`
}

// UpcomingMaintenance is the Notice type of a Compute Engine
// upcoming-maintenance announcement.
const UpcomingMaintenance = "UPCOMING_MAINTENANCE"

// RebalanceRecommendation is the Notice type of an EC2 rebalance
// recommendation: a Spot instance is at elevated risk of interruption.
const RebalanceRecommendation = "REBALANCE_RECOMMENDATION"

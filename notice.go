package forewarn

import "time"

// Notice is a maintenance event as a VM sees it through either metadata
// API, normalized by the client packages for the agent and other users.
type Notice struct {
	// ID is the Azure EventId, or for Compute Engine a stable name of the
	// key and value that announced it.
	ID string `json:"id"`
	// Type is the Azure EventType (Freeze, Reboot, Redeploy, Preempt,
	// Terminate), or for Compute Engine the maintenance-event value,
	// Preempt, or UPCOMING_MAINTENANCE.
	Type string `json:"type"`
	// Status is Scheduled or Started.
	Status    string   `json:"status"`
	Resources []string `json:"resources"`
	// NotBefore is zero when unknown or once started.
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

package v1alpha1

// Notification sends a Sync's transitions to one receiver: a generic JSON webhook
// (optionally HMAC-signed), a Slack-compatible or Microsoft Teams incoming webhook, or a
// commit status on GitHub, GitLab or Gitea. Its Secret is read as the Sync's identity.
type Notification struct {
	// Type is the kind of receiver.
	// +kubebuilder:validation:Enum=generic;generic-hmac;slack;msteams;github;gitlab;gitea
	// +required
	Type string `json:"type"`
	// Address is the webhook URL (generic, generic-hmac, slack, msteams) or the repository's
	// URL (github, gitlab, gitea: https://github.com/org/repo). The Secret's key "address"
	// replaces it (a Slack or Teams webhook URL is itself a credential).
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Address string `json:"address,omitempty"`
	// Channel overrides the Slack channel (needed with a bot token and chat.postMessage).
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Channel string `json:"channel,omitempty"`
	// SecretRef names a Secret in the Sync's namespace, with Flux's keys: "address",
	// "token" (a bearer or access token; the HMAC key of generic-hmac), "username" and
	// "password" (basic auth), "ca.crt" (the only roots trusted for the address).
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0",message="must name a Secret",fieldPath=".name"
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// On lists the transitions to send; empty: all four.
	// +kubebuilder:validation:MaxItems=4
	// +optional
	On []NotificationTransition `json:"on,omitempty"`
}

// NotificationTransition is a transition a Notification sends.
// +kubebuilder:validation:Enum=BecameReady;Failed;Drifted;RolledBack
type NotificationTransition string

package notify

import "time"

// Slack's incoming webhook message: a fallback text and one attachment with the message and
// the facts as fields (https://api.slack.com/messaging/webhooks, "attachments").
type slackMessage struct {
	Channel     string            `json:"channel,omitempty"`
	Username    string            `json:"username"`
	Text        string            `json:"text"`
	Attachments []slackAttachment `json:"attachments"`
}

type slackAttachment struct {
	Color    string       `json:"color"`
	Title    string       `json:"title"`
	Text     string       `json:"text"`
	MrkdwnIn []string     `json:"mrkdwn_in"`
	Fields   []slackField `json:"fields"`
	Ts       int64        `json:"ts"`
}

type slackField struct {
	Title string `json:"title"`
	Value string `json:"value"`
	Short bool   `json:"short"`
}

// color is the attachment's bar: green when Ready, red on failure, amber otherwise.
func (e Event) color() string {
	switch e.Transition {
	case BecameReady:
		return "good"
	case Failed, RolledBack:
		return "danger"
	}
	return "warning"
}

// facts are the key/value pairs chat messages show, empty values left out.
func (e Event) facts() [][2]string {
	var out [][2]string
	for _, f := range [][2]string{{"transition", string(e.Transition)}, {"revision", e.Revision},
		{"reason", e.Reason}, {"cluster", e.Cluster}, {"time", e.Time.UTC().Format(time.RFC3339)}} {
		if f[1] != "" {
			out = append(out, f)
		}
	}
	return out
}

func slackBody(e Event, channel string) slackMessage {
	a := slackAttachment{Color: e.color(), Title: e.title(), Text: truncate(e.Message, maxChatMessage),
		MrkdwnIn: []string{"text"}, Ts: e.Time.Unix()}
	for _, f := range e.facts() {
		a.Fields = append(a.Fields, slackField{Title: f[0], Value: truncate(f[1], 300), Short: f[0] != "revision"})
	}
	return slackMessage{Channel: channel, Username: "converge", Text: e.title(), Attachments: []slackAttachment{a}}
}

// Microsoft Teams: a message with one Adaptive Card 1.4 attachment, the shape Teams'
// workflow webhooks take and Flux sends (a title, the message, a fact set).
type teamsMessage struct {
	Type        string            `json:"type"`
	Attachments []teamsAttachment `json:"attachments"`
}

type teamsAttachment struct {
	ContentType string    `json:"contentType"`
	Content     teamsCard `json:"content"`
}

type teamsCard struct {
	Schema  string            `json:"$schema"`
	Type    string            `json:"type"`
	Version string            `json:"version"`
	Body    []teamsElement    `json:"body"`
	MSTeams map[string]string `json:"msteams"`
}

type teamsElement struct {
	Type   string         `json:"type"`
	Text   string         `json:"text,omitempty"`
	Size   string         `json:"size,omitempty"`
	Weight string         `json:"weight,omitempty"`
	Color  string         `json:"color,omitempty"`
	Wrap   bool           `json:"wrap,omitempty"`
	Facts  []teamsFact    `json:"facts,omitempty"`
	Items  []teamsElement `json:"items,omitempty"`
}

type teamsFact struct {
	Title string `json:"title"`
	Value string `json:"value"`
}

// teamsBody is the card: the title, the message (left out when empty: a TextBlock's text is
// required), the facts.
func teamsBody(e Event) teamsMessage {
	items := []teamsElement{{Type: "TextBlock", Text: e.title(), Size: "large", Weight: "bolder", Wrap: true}}
	if e.Message != "" {
		msg := teamsElement{Type: "TextBlock", Text: truncate(e.Message, maxChatMessage), Wrap: true}
		if e.Transition == Failed || e.Transition == RolledBack {
			msg.Color = "attention"
		}
		items = append(items, msg)
	}
	facts := teamsElement{Type: "FactSet"}
	for _, f := range e.facts() {
		facts.Facts = append(facts.Facts, teamsFact{Title: f[0], Value: truncate(f[1], 300)})
	}
	card := teamsCard{
		Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard", Version: "1.4",
		MSTeams: map[string]string{"width": "Full"},
		Body:    []teamsElement{{Type: "Container", Items: append(items, facts)}},
	}
	return teamsMessage{Type: "message", Attachments: []teamsAttachment{{ContentType: "application/vnd.microsoft.card.adaptive", Content: card}}}
}

package record

// Host is the host a profile record is attributed to, the one rule every
// consumer follows: its host header, else its key. The agent and
// stackstream-ingest set both to the same host (the key keeps one host's
// records on one partition); a producer that sets neither leaves Host empty,
// and then each sample's host label (LabelHost) names its host.
func Host(m Meta, key []byte) string {
	if m.Host != "" {
		return m.Host
	}
	return string(key)
}

package record

import "testing"

func TestHost(t *testing.T) {
	tests := []struct {
		name, header, key, want string
	}{
		{"header and key, as the agent and ingest set them", "web-1", "web-1", "web-1"},
		{"header wins over key", "web-1", "other", "web-1"},
		{"key without header", "", "web-2", "web-2"},
		{"neither: the samples' host labels decide", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var key []byte
			if tt.key != "" {
				key = []byte(tt.key)
			}
			if got := Host(Meta{Host: tt.header}, key); got != tt.want {
				t.Fatalf("Host(header %q, key %q) = %q, want %q", tt.header, tt.key, got, tt.want)
			}
		})
	}
}

package caps

import (
	"strings"
	"testing"
)

func TestMissing(t *testing.T) {
	tests := []struct {
		name string
		eff  uint64
		want string // "" = allowed
	}{
		{"root", 0x000001ffffffffff, ""},
		{"sys_admin only", 1 << capSysAdmin, ""},
		{"bpf and perfmon", 1<<capBPF | 1<<capPerfmon, ""},
		{"none", 0, "CAP_BPF+CAP_PERFMON"},
		{"bpf only", 1 << capBPF, "missing capability CAP_PERFMON:"},
		{"perfmon only", 1 << capPerfmon, "missing capability CAP_BPF:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Missing(tt.eff)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Missing(%x) = %v, want nil", tt.eff, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Missing(%x) = %v, want %q", tt.eff, err, tt.want)
			}
		})
	}
}

func TestEffective(t *testing.T) {
	got, err := Effective([]byte("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n"))
	if err != nil || got != 0x1ffffffffff {
		t.Fatalf("Effective = %x, %v", got, err)
	}
	if _, err := Effective([]byte("Name:\tx\n")); err == nil {
		t.Fatal("want an error without CapEff")
	}
}

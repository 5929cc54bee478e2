package sampler

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestUnwindOpenSSL: Debian's openssl, whose libcrypto hot loops are
// perlasm assembly that realigns the stack: the CFA is *(rsp+N)+K
// (RuleDeref) or another register plus an offset (rax+8, r9+8: followed in
// the first frame). At least 99% of the samples in libcrypto must reach
// _start. AES-GCM's hot loop (_aesni_ctr32_ghash_6x) is a leaf called by
// aesni_gcm_encrypt, whose CFA is rax+8 at the call: rax is unknown in the
// second frame, so those walks must stop there, two frames deep, never
// reading on from a wrong CFA.
func TestUnwindOpenSSL(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		secondFrame bool // the walk stops at a register CFA in the second frame
	}{
		{[]string{"-evp", "chacha20-poly1305"}, false},
		{[]string{"-evp", "sha512"}, false},
		{[]string{"sha256"}, false},
		{[]string{"-evp", "aes-256-gcm"}, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := exec.Command("openssl", append([]string{"speed", "-seconds", "10", "-bytes", "16384"}, tc.args...)...)
			stacks, counts, c, _ := unwindRun(t, cmd, 3*time.Second)
			var total, crypto, done, stopped uint64
			for i, st := range stacks {
				total += counts[i]
				if len(st) == 0 || !strings.HasPrefix(st[0], "libcrypto.so.3:") {
					continue
				}
				crypto += counts[i]
				switch {
				case complete(st):
					done += counts[i]
				case tc.secondFrame && len(st) == 2 && strings.HasPrefix(st[1], "libcrypto.so.3:"):
					stopped += counts[i]
				case counts[i]*50 > total || tc.secondFrame:
					t.Errorf("%d samples incomplete: %s", counts[i], strings.Join(st, " <- "))
				}
			}
			t.Logf("%d samples, %d in libcrypto, %d of them complete (%.1f%%), %d stopped in the second frame; counters %+v",
				total, crypto, done, 100*float64(done)/float64(max(crypto, 1)), stopped, c)
			if crypto < 50 || crypto*2 < total {
				t.Fatalf("%d of %d samples in libcrypto", crypto, total)
			}
			if (done+stopped)*100 < crypto*99 {
				t.Errorf("%d of %d samples in libcrypto complete, %d stopped in the second frame; want 99%%", done, crypto, stopped)
			}
			if c.UnwindReadErrors != 0 {
				t.Errorf("%d read errors", c.UnwindReadErrors)
			}
		})
	}
}

package record

import (
	"encoding/binary"
	"hash/crc32"
)

// AppendStored appends the content of a gzip value whose deflate blocks are
// all stored (EncodeProfileStored's output) to dst: the blocks are copied
// and the checksum verified, no inflating. ok is false for anything else
// (compressed blocks, header flags, trailing data, a bad checksum, more than
// MaxProfileBytes): the caller then reads the value with a gzip reader, which
// handles what is valid and explains what is not.
func AppendStored(dst, value []byte) (out []byte, ok bool) {
	return appendStored(dst, value, MaxProfileBytes)
}

// appendStored is AppendStored refusing content beyond limit bytes.
func appendStored(dst, value []byte, limit int) (out []byte, ok bool) {
	// The header (RFC 1952): magic, method deflate, no flags, then mtime,
	// extra flags and OS, which do not matter.
	if len(value) < 10 || value[0] != 0x1f || value[1] != 0x8b || value[2] != 8 || value[3] != 0 {
		return dst, false
	}
	b := value[10:]
	start := len(dst)
	for {
		// A stored block (RFC 1951): BFINAL and BTYPE=00 in the low bits of
		// a byte (a stored block after another stored block starts on a
		// byte boundary; the rest of the byte is padding), then LEN and its
		// complement, then LEN bytes.
		if len(b) < 5 || b[0]&6 != 0 {
			return dst[:start], false
		}
		final := b[0]&1 == 1
		n := binary.LittleEndian.Uint16(b[1:])
		if binary.LittleEndian.Uint16(b[3:]) != ^n || len(b)-5 < int(n) || len(dst)-start+int(n) > limit {
			return dst[:start], false
		}
		dst = append(dst, b[5:5+int(n)]...)
		b = b[5+int(n):]
		if final {
			break
		}
	}
	// The trailer: CRC-32 and size of the content, and nothing after it (a
	// gzip reader would read it as another member).
	content := dst[start:]
	if len(b) != 8 || binary.LittleEndian.Uint32(b) != crc32.ChecksumIEEE(content) || binary.LittleEndian.Uint32(b[4:]) != uint32(len(content)) {
		return dst[:start], false
	}
	return dst, true
}

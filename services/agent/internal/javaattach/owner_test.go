package javaattach

import (
	"os"
	"syscall"
)

func ownerOf(fi os.FileInfo) uint32 {
	if fi == nil {
		return 0
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

//go:build linux

package main

import "syscall"

// fsMagic names the filesystems whose fsync behaviour matters for the
// comparison (tmpfs makes fsync free).
var fsMagic = map[int64]string{
	0xEF53:     "ext4",
	0x58465342: "xfs",
	0x9123683E: "btrfs",
	0x01021994: "tmpfs",
	0x794C7630: "overlayfs",
	0x2FC12FC1: "zfs",
	0x6969:     "nfs",
}

// fsType returns the type of the filesystem holding path, "unknown" if it
// cannot be told.
func fsType(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return "unknown"
	}
	if name, ok := fsMagic[int64(st.Type)]; ok {
		return name
	}
	return "unknown"
}

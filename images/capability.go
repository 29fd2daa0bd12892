package images

import (
	"encoding/binary"
	"fmt"
)

// Linux capability numbers (linux/capability.h) that images grant as file
// capabilities.
const (
	// CapNetBindService allows binding ports below 1024.
	CapNetBindService = 10
)

// XattrCapability is the extended attribute that holds a file's
// capabilities (security.capability), read by execve.
const XattrCapability = "security.capability"

// vfs_cap_data revision 2 (linux/capability.h): a little-endian magic word
// holding the revision and the effective flag, then the permitted and
// inheritable masks of capabilities 0-31 and of 32-63.
const (
	vfsCapRevision2     = 0x02000000
	vfsCapFlagEffective = 0x000001
	vfsCapV2Size        = 4 + 2*8
)

// FileCapabilities returns the security.capability value that grants caps
// as permitted and effective ("setcap cap_x,cap_y=+ep"). A process that
// runs as a non-root user loses its capabilities at execve unless the file
// carries them; with this attribute execve gives them back where the
// bounding set holds them (a pod's securityContext.capabilities.add).
// Under no_new_privs (allowPrivilegeEscalation: false) the kernel grants
// them only if the process already held them in its permitted set before
// the execve, as containerd's runc leaves a container's added capabilities;
// a runtime that empties the permitted set of non-root users (Docker,
// CRI-O) makes the attribute grant nothing there (TestFileCapabilityBindsPort53
// shows both sides).
func FileCapabilities(caps ...int) ([]byte, error) {
	var permitted [2]uint32
	for _, c := range caps {
		if c < 0 || c > 63 {
			return nil, fmt.Errorf("file capability %d: out of range 0-63", c)
		}
		permitted[c/32] |= 1 << (c % 32)
	}
	b := make([]byte, vfsCapV2Size)
	binary.LittleEndian.PutUint32(b[0:], vfsCapRevision2|vfsCapFlagEffective)
	binary.LittleEndian.PutUint32(b[4:], permitted[0]) // permitted 0-31
	binary.LittleEndian.PutUint32(b[8:], 0)            // inheritable 0-31
	binary.LittleEndian.PutUint32(b[12:], permitted[1])
	binary.LittleEndian.PutUint32(b[16:], 0)
	return b, nil
}

package diagnose

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// socket is one line of /proc/net/{udp,tcp}[6].
type socket struct {
	IP    net.IP
	Port  int
	State int // TCP: 0x0A is LISTEN; UDP: 0x07 unconnected
	Inode uint64
}

const (
	tcpListen      = 0x0a
	udpUnconnected = 0x07
)

// parseProcNet parses the socket table the kernel prints in
// /proc/net/{tcp,udp}[6]: the kernel prints each 32-bit word of an address
// as a number in hex, and that number is the word's network-order bytes read
// in the host's byte order (little-endian on x86 and arm64, big-endian on
// s390x), so the bytes come back through binary.NativeEndian.
func parseProcNet(data string) ([]socket, error) {
	var out []socket
	sc := bufio.NewScanner(strings.NewReader(data))
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			continue
		}
		host, port, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("local address %q", f[1])
		}
		raw, err := hex.DecodeString(host)
		if err != nil || (len(raw) != 4 && len(raw) != 16) {
			return nil, fmt.Errorf("local address %q", f[1])
		}
		ip := make(net.IP, len(raw))
		for w := 0; w < len(raw); w += 4 {
			binary.NativeEndian.PutUint32(ip[w:], binary.BigEndian.Uint32(raw[w:]))
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("local port %q", f[1])
		}
		st, err := strconv.ParseUint(f[3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("state %q", f[3])
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("inode %q", f[9])
		}
		out = append(out, socket{IP: ip, Port: int(p), State: int(st), Inode: inode})
	}
	return out, sc.Err()
}

// holder is a process holding a socket.
type holder struct {
	PID  int
	Comm string
}

func (h holder) String() string { return fmt.Sprintf("%s (pid %d)", h.Comm, h.PID) }

// socketHolders maps socket inodes to the processes that hold them, from
// the /proc/<pid>/fd links ("socket:[inode]").
func socketHolders(proc string, inodes map[uint64]bool) map[uint64][]holder {
	out := map[uint64][]holder{}
	dirs, _ := os.ReadDir(proc)
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join(proc, d.Name(), "fd"))
		var comm string
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(proc, d.Name(), "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			inode, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]"), 10, 64)
			if err != nil || !inodes[inode] {
				continue
			}
			if comm == "" {
				b, _ := os.ReadFile(filepath.Join(proc, d.Name(), "comm"))
				comm = strings.TrimSpace(string(b))
			}
			out[inode] = append(out[inode], holder{PID: pid, Comm: comm})
		}
	}
	return out
}

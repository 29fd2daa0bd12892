package server

import (
	"fmt"
	"net"
	"os"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// inherited holds the sockets of Config.Inherited until Start matches them
// to listen addresses.
type inherited struct {
	udp []*net.UDPConn
	tcp []*net.TCPListener
}

// adoptInherited turns files into sockets, closing every file.
func adoptInherited(files []*os.File) (*inherited, error) {
	inh := &inherited{}
	defer closeFiles(files)
	for _, f := range files {
		typ, err := socketType(f)
		if err != nil {
			inh.closeAll()
			return nil, fmt.Errorf("inherited socket %s: %w", f.Name(), err)
		}
		switch typ {
		case unix.SOCK_DGRAM:
			pc, err := net.FilePacketConn(f)
			if err != nil {
				inh.closeAll()
				return nil, fmt.Errorf("inherited udp socket %s: %w", f.Name(), err)
			}
			u, ok := pc.(*net.UDPConn)
			if !ok {
				_ = pc.Close()
				inh.closeAll()
				return nil, fmt.Errorf("inherited socket %s: not UDP", f.Name())
			}
			inh.udp = append(inh.udp, u)
		case unix.SOCK_STREAM:
			l, err := net.FileListener(f)
			if err != nil {
				inh.closeAll()
				return nil, fmt.Errorf("inherited tcp socket %s: %w", f.Name(), err)
			}
			t, ok := l.(*net.TCPListener)
			if !ok {
				_ = l.Close()
				inh.closeAll()
				return nil, fmt.Errorf("inherited socket %s: not a TCP listener", f.Name())
			}
			inh.tcp = append(inh.tcp, t)
		default:
			inh.closeAll()
			return nil, fmt.Errorf("inherited socket %s: type %d", f.Name(), typ)
		}
	}
	return inh, nil
}

// matches reports whether a socket bound to got serves the wanted address
// (want.Port 0 matches any port).
func matches(got net.Addr, want *net.UDPAddr) bool {
	var ip net.IP
	var port int
	switch a := got.(type) {
	case *net.UDPAddr:
		ip, port = a.IP, a.Port
	case *net.TCPAddr:
		ip, port = a.IP, a.Port
	default:
		return false
	}
	return ip.Equal(want.IP) && (want.Port == 0 || want.Port == port)
}

// takeUDP removes and returns the UDP sockets bound to want.
func (inh *inherited) takeUDP(want *net.UDPAddr) []*net.UDPConn {
	var got, rest []*net.UDPConn
	for _, u := range inh.udp {
		if matches(u.LocalAddr(), want) && (len(got) == 0 || matches(u.LocalAddr(), got[0].LocalAddr().(*net.UDPAddr))) {
			got = append(got, u)
		} else {
			rest = append(rest, u)
		}
	}
	inh.udp = rest
	return got
}

// takeTCP removes and returns the TCP listener bound to want, or nil.
func (inh *inherited) takeTCP(want *net.UDPAddr) *net.TCPListener {
	for i, l := range inh.tcp {
		if matches(l.Addr(), want) {
			inh.tcp = append(inh.tcp[:i], inh.tcp[i+1:]...)
			return l
		}
	}
	return nil
}

// closeUnused closes the sockets that matched no listen address.
func (inh *inherited) closeUnused(log *zap.Logger) {
	for _, u := range inh.udp {
		log.Warn("closing inherited socket that matches no listen address", zap.String("udp", u.LocalAddr().String()))
	}
	for _, l := range inh.tcp {
		log.Warn("closing inherited socket that matches no listen address", zap.String("tcp", l.Addr().String()))
	}
	inh.closeAll()
}

func (inh *inherited) closeAll() {
	for _, u := range inh.udp {
		_ = u.Close()
	}
	for _, l := range inh.tcp {
		_ = l.Close()
	}
	inh.udp, inh.tcp = nil, nil
}

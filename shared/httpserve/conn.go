package httpserve

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

const textPlain = "text/plain; charset=utf-8"

// response is what goes back on a connection.
type response struct {
	status      int
	contentType string
	body        []byte
	allow       bool // send "Allow: GET, HEAD" (405)
	head        bool // HEAD: headers only, Content-Length of the GET body
}

// errorResponse is a plain-text error answer in the style of net/http.
func errorResponse(status int) response {
	text := strings.ToLower(reason(status))
	if status == 404 {
		text = "page not found"
	}
	return response{
		status:      status,
		contentType: textPlain,
		body:        []byte(strconv.Itoa(status) + " " + text + "\n"),
		allow:       status == 405,
	}
}

// serveConn answers one request on st's connection and closes it.
func (s *Server) serveConn(st *slot) {
	c := st.c
	defer s.release(st)
	defer c.Close()

	c.SetReadDeadline(time.Now().Add(s.headTimeout))
	// The limit applies to what bufio pulls from c: the request line and
	// headers must complete within maxHeadBytes of input.
	lr := &io.LimitedReader{R: c, N: maxHeadBytes}
	line, resp, ok := readHead(textproto.NewReader(bufio.NewReaderSize(lr, 4<<10)), lr)
	if !ok {
		return // nothing worth answering: the client sent nothing, or went away
	}
	if !s.serving(st) {
		return // evicted while its head arrived
	}
	if resp.status == 0 {
		resp = s.route(line)
	}
	c.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	if err := writeResponse(c, resp); err != nil {
		return
	}
	s.lingering(st)
	linger(c)
}

// readAndRoute reads the request head and decides the answer. ok is false
// when the connection should be closed without one.
func (s *Server) readAndRoute(tp *textproto.Reader, lr *io.LimitedReader) (resp response, ok bool) {
	line, resp, ok := readHead(tp, lr)
	if !ok || resp.status != 0 {
		return resp, ok
	}
	return s.route(line), true
}

// readHead reads the request line and the headers. It returns the line, or
// an error answer (status != 0) when the head is unusable; ok is false when
// the connection should be closed without an answer.
func readHead(tp *textproto.Reader, lr *io.LimitedReader) (line string, resp response, ok bool) {
	line, err := tp.ReadLine()
	if err == nil {
		// Headers are read only to reach the end of the head; their
		// content does not matter for these endpoints.
		_, err = tp.ReadMIMEHeader()
	}
	if err != nil {
		switch {
		case lr.N == 0:
			return "", errorResponse(431), true
		case lr.N == maxHeadBytes:
			return "", response{}, false // not a byte arrived
		case isTimeout(err):
			return "", errorResponse(408), true
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), isNetError(err):
			return "", response{}, false // the client closed or reset mid-head
		default:
			return "", errorResponse(400), true // malformed header
		}
	}
	return line, response{}, true
}

// route decides the answer to a complete head's request line.
func (s *Server) route(line string) response {
	method, target, proto, ok := parseRequestLine(line)
	if !ok {
		return errorResponse(400)
	}
	if proto != "HTTP/1.0" && proto != "HTTP/1.1" {
		return errorResponse(400)
	}
	path, ok := requestPath(target)
	if !ok {
		return errorResponse(400)
	}
	head := method == "HEAD"
	if method != "GET" && !head {
		return errorResponse(405)
	}
	var resp response
	if h, found := s.routes[path]; found {
		resp = callHandler(h)
	} else {
		resp = errorResponse(404)
	}
	resp.head = head
	return resp
}

// callHandler runs h, turning a panic or an unusable result into a 500.
func callHandler(h Handler) (resp response) {
	defer func() {
		if recover() != nil {
			resp = errorResponse(500)
		}
	}()
	var body bytes.Buffer
	status, contentType := h(&body)
	if status < 200 || status > 999 { // 1xx are interim, not final answers
		return errorResponse(500)
	}
	if contentType == "" || strings.ContainsAny(contentType, "\r\n") {
		contentType = "application/octet-stream"
	}
	return response{status: status, contentType: contentType, body: body.Bytes()}
}

// parseRequestLine splits "METHOD SP TARGET SP HTTP/1.x" (RFC 9112
// section 3). Exactly two single spaces; the method must be a token.
func parseRequestLine(line string) (method, target, proto string, ok bool) {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !isToken(method) || target == "" || strings.Contains(proto, " ") {
		return "", "", "", false
	}
	return method, target, proto, true
}

// requestPath returns the path of an origin-form ("/p?q") or absolute-form
// ("http://host/p?q") target (RFC 9112 section 3.2), without the query.
func requestPath(target string) (string, bool) {
	if strings.ContainsAny(target, " \t\r\n\x00") {
		return "", false
	}
	if target[0] != '/' {
		lower := strings.ToLower(target)
		var rest string
		switch {
		case strings.HasPrefix(lower, "http://"):
			rest = target[len("http://"):]
		case strings.HasPrefix(lower, "https://"):
			rest = target[len("https://"):]
		default:
			return "", false // authority-form, asterisk-form, garbage
		}
		i := strings.IndexAny(rest, "/?")
		if i < 0 {
			return "/", true
		}
		if rest[i] == '?' {
			return "/", true
		}
		target = rest[i:]
	}
	path, _, _ := strings.Cut(target, "?")
	return path, true
}

// isToken reports whether s is an RFC 9110 section 5.6.2 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func writeResponse(c net.Conn, r response) error {
	var h bytes.Buffer
	h.WriteString("HTTP/1.1 ")
	h.WriteString(strconv.Itoa(r.status))
	h.WriteByte(' ')
	h.WriteString(reason(r.status))
	h.WriteString("\r\nContent-Type: ")
	h.WriteString(r.contentType)
	h.WriteString("\r\nContent-Length: ")
	h.WriteString(strconv.Itoa(len(r.body)))
	if r.allow {
		h.WriteString("\r\nAllow: GET, HEAD")
	}
	h.WriteString("\r\nConnection: close\r\n\r\n")
	bufs := net.Buffers{h.Bytes()}
	if !r.head && len(r.body) > 0 {
		bufs = append(bufs, r.body)
	}
	_, err := bufs.WriteTo(c)
	return err
}

// linger half-closes c and reads until the client closes its side, for at
// most lingerTimeout: closing a socket with unread input makes the kernel
// send a RST, which may make the client drop a response it has not read.
func linger(c net.Conn) {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	c.SetReadDeadline(time.Now().Add(lingerTimeout))
	io.Copy(io.Discard, io.LimitReader(c, 4*maxHeadBytes))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isNetError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}

// reason returns the reason phrase for a status code (RFC 9110 section 15),
// or the name of its class for codes not listed.
func reason(status int) string {
	switch status {
	case 200:
		return "OK"
	case 204:
		return "No Content"
	case 400:
		return "Bad Request"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 429:
		return "Too Many Requests"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 503:
		return "Service Unavailable"
	}
	switch status / 100 {
	case 1:
		return "Informational"
	case 2:
		return "Success"
	case 3:
		return "Redirection"
	case 4:
		return "Client Error"
	default:
		return "Server Error"
	}
}

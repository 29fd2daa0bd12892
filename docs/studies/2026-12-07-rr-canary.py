# A canary for compare's generator: run it as the generator runs, under
# SCHED_RR priority 1 (chrt -r 1), pinned to one CPU. It sleeps 2 ms at a
# time and logs every wake-up more than 20 ms late, with the real-time
# (SCHED_FIFO/SCHED_RR) threads of the machine that used CPU since its
# last look. No ordinary thread, whatever its niceness, can keep an
# SCHED_RR task off its CPU for long; another SCHED_RR thread of the same
# priority on the same CPU takes turns with it, one time slice each
# (/proc/sys/kernel/sched_rr_timeslice_ms, 100 ms).
#
#   chrt -r 1 python3 2026-12-07-rr-canary.py CPU SECONDS LOGFILE
import os, sys, time, glob
cpu = int(sys.argv[1]); dur = float(sys.argv[2]); out = open(sys.argv[3], "a", buffering=1)
os.sched_setaffinity(0, {cpu})
me = os.getpid()
def rt_threads():
    r = {}
    for st in glob.glob("/proc/[0-9]*/task/[0-9]*/stat"):
        try:
            s = open(st).read()
        except OSError:
            continue
        i = s.rindex(")")
        f = s[i+2:].split()
        pol = int(f[38])
        if pol in (1, 2):  # FIFO, RR
            pid = int(st.split("/")[2])
            if pid == me: continue
            r[st] = (s[s.index("(")+1:i], int(f[11]) + int(f[12]), int(f[36]), pid)  # comm, ticks, processor
    return r
prev = rt_threads(); last_snap = time.time()
end = time.time() + dur
while time.time() < end:
    t0 = time.monotonic()
    time.sleep(0.002)
    late = time.monotonic() - t0 - 0.002
    now = time.time()
    if late > 0.02:
        cur = rt_threads()
        busy = ["%s[%d]cpu%d:+%dticks" % (v[0], v[3], v[2], v[1] - prev.get(k, v)[1]) for k, v in cur.items() if v[1] - prev.get(k, v)[1] > 0]
        out.write("%s cpu%d woke %.1f ms late; RT threads busy since %.0f ms: %s\n" % (time.strftime("%H:%M:%S", time.gmtime(now)) + ".%03d" % int(now % 1 * 1000), cpu, late * 1000, (now - last_snap) * 1000, " ".join(busy) or "none"))
        prev, last_snap = cur, now
    elif now - last_snap > 0.2:
        prev, last_snap = rt_threads(), now

#!/bin/bash
# Measures readerbench's reader modes and unbound at 20,000 queries per
# second (rounds, the servers taking turns), then at saturation, then under
# a collection forced every 100 ms. Server on CPU 1, dnsperf on CPU 0, both
# SCHED_RR. Needs root (chrt, perf), dnsperf, perf and unbound.
#
# Usage: sudo tools/readerbench/run.sh ROUNDS OUTDIR
#   ONLY="poller thread ..."  the servers of the 20k rounds (default: all:
#                             poller thread blocking unbound thread-noyield
#                             blocking-noyield thread-netpoll; thread-1p,
#                             thread with GOMAXPROCS 1, only when named)
#   RATE_ONLY=1               only the 20k rounds
#   NO_GC=1                   no forced-GC runs
#   SERVER_RT=                readerbench under SCHED_OTHER (default
#                             "chrt -r 1"); unbound and dnsperf stay SCHED_RR
# ROUNDS 0 runs only the saturation and forced-GC parts. Results: OUTDIR/
# rate.txt (20k rounds), sat.txt, gc.txt; each dnsperf and perf output and
# each server's stdout/stderr beside them (README.md).
set -u
if [ $# -ne 2 ]; then
	sed -n '7,18p' "$0" >&2
	exit 2
fi
ROUNDS=$1
mkdir -p "$2" || exit 1
OUT=$(cd "$2" && pwd)
cd "$(dirname "$0")/../.." || exit 1
BIN=bin/readerbench
${GO:-go} build -o "$BIN" ./tools/readerbench || exit 1
QUERIES=$OUT/queries.txt
UBCONF=$OUT/unbound.conf
for i in $(seq 0 299); do echo "name$i.test A"; done >"$QUERIES"
{
	cat tools/readerbench/unbound.conf
	for i in $(seq 0 299); do
		printf '\tlocal-data: "name%d.test. 60 IN A 10.0.%d.%d"\n' $i $((i / 256)) $((i % 256))
	done
} >"$UBCONF"
GOPORT=15470
UBPORT=15460
PID=
PORT=

# cpu PID: "ticks schedstat_ns voluntary+involuntary_ctxsw" summed over threads
cpu() {
	local p=$1 ticks ns=0 cs=0 t
	ticks=$(awk '{print $14+$15}' /proc/$p/stat)
	for t in /proc/$p/task/*; do
		ns=$((ns + $(awk '{print $1}' $t/schedstat)))
		cs=$((cs + $(awk '/ctxt_switches/{s+=$2} END{print s}' $t/status)))
	done
	echo "$ticks $ns $cs"
}

start() { # start NAME [extra args...]; sets PID, PORT
	local name=$1
	shift
	if [ "$name" = unbound ]; then
		PORT=$UBPORT
		# the reference: always SCHED_RR, whatever SERVER_RT says
		chrt -r 1 taskset -c 1 unbound -d -c "$UBCONF" >"$OUT/unbound.log" 2>&1 &
	else
		PORT=$GOPORT
		env "${ENVV[@]}" $RT taskset -c 1 "$BIN" ${ARGS[$name]} -addr 127.0.0.1:$PORT "$@" \
			>>"$OUT/$name.out" 2>>"$OUT/$name.err" &
	fi
	PID=$!
	sleep 0.5
	# warm up
	dp -l 1 -Q 20000 >/dev/null 2>&1
}

stop() { kill -TERM $PID; wait $PID 2>/dev/null; }

dp() { chrt -r 1 taskset -c 0 dnsperf -s 127.0.0.1 -p $PORT -d "$QUERIES" "$@"; }
field() { awk -v k="$1" '$0 ~ k {print $'"$2"'}' "$3" | head -1; }

rate_run() { # NAME ROUND
	local name=$1 r=$2 f="$OUT/$1.r$2" a b
	# CPU over 4 s in the middle of a 5 s run
	dp -l 5 -Q 20000 >"$f.dp" 2>&1 &
	local D=$!
	sleep 0.5
	[ "$name" != unbound ] && kill -USR1 $PID
	a=$(cpu $PID)
	sleep 4
	b=$(cpu $PID)
	[ "$name" != unbound ] && kill -USR1 $PID
	wait $D
	local qps lat lost
	qps=$(field "Queries per second" 4 "$f.dp")
	lat=$(field "Average Latency" 4 "$f.dp")
	lost=$(field "Queries lost" 3 "$f.dp")
	# second run: system calls and context switches over 3 s under perf
	dp -l 5 -Q 20000 >"$f.dp2" 2>&1 &
	D=$!
	sleep 1
	perf stat -x, -e raw_syscalls:sys_enter,context-switches -p $PID -- sleep 3 2>"$f.perf"
	wait $D
	local qps2 sc cs
	qps2=$(field "Queries per second" 4 "$f.dp2")
	sc=$(awk -F, '/raw_syscalls/{print $1}' "$f.perf")
	cs=$(awk -F, '/context-switches/{print $1}' "$f.perf")
	echo "$a $b" | awk -v n=$name -v r=$r -v q=$qps -v q2=$qps2 -v lat=$lat -v lost=$lost -v sc=$sc -v cs=$cs '{
		nq=q*4; printf "%-9s r%d qps=%.0f cpu_us/q(stat)=%.2f cpu_us/q(schedstat)=%.2f ctxsw/q(proc)=%.3f syscalls/q=%.3f ctxsw/q(perf)=%.3f lat_us=%.1f lost=%s\n",
		n, r, q, ($4-$1)*10000/nq, ($5-$2)/1000/nq, ($6-$3)/nq, sc/(q2*3), cs/(q2*3), lat*1e6, lost}' | tee -a "$OUT/rate.txt"
}

sat_run() { # NAME
	local name=$1 f="$OUT/$1.sat" a b
	a=$(cpu $PID)
	dp -l 5 -c 4 >"$f.dp" 2>&1
	b=$(cpu $PID)
	local done
	done=$(awk '/Queries completed/{print $3}' "$f.dp")
	echo "$a $b" | awk -v n=$name -v q=$done '{printf "%-9s sat completed=%d cpu_s(stat)=%.2f q/CPU-s(stat)=%.0f q/CPU-s(schedstat)=%.0f\n",
		n, q, ($4-$1)/100, q/(($4-$1)/100), q/(($5-$2)/1e9)}' | tee -a "$OUT/sat.txt"
}

ENVV=(GODEBUG=)
RT=${SERVER_RT-chrt -r 1}
declare -A ARGS=(
	[poller]="-mode poller"
	[thread]="-mode thread"
	[blocking]="-mode blocking"
	[thread-noyield]="-mode thread -yield 0"
	[blocking-noyield]="-mode blocking -yield 0"
	[thread-netpoll]="-mode thread-netpoll"
	[thread-1p]="-mode thread -procs 1"
)
MODES=(${ONLY:-poller thread blocking unbound thread-noyield blocking-noyield thread-netpoll})
NM=${#MODES[@]}
echo "readerbench: ${RT:-SCHED_OTHER}" | tee -a "$OUT/rate.txt"
uptime | tee -a "$OUT/rate.txt"
for r in $(seq 1 $ROUNDS); do
	# rotate the order each round
	for i in $(seq 0 $((NM - 1))); do
		m=${MODES[$(((i + r - 1) % NM))]}
		start $m
		rate_run $m $r
		stop
	done
done
if [ -n "${RATE_ONLY:-}" ]; then
	uptime | tee -a "$OUT/rate.txt"
	exit 0
fi
echo "readerbench: ${RT:-SCHED_OTHER}" | tee -a "$OUT/sat.txt"
for m in poller thread blocking unbound; do
	start $m
	sat_run $m
	stop
done
if [ -n "${NO_GC:-}" ]; then
	uptime | tee -a "$OUT/rate.txt"
	exit 0
fi
# A collection forced every 100 ms, with gctrace: once with readerbench under
# SCHED_RR, once under SCHED_OTHER, whatever SERVER_RT says.
ENVV=(GODEBUG=gctrace=1)
for RT in "chrt -r 1" ""; do
	sched=${RT:-SCHED_OTHER}
	for m in poller thread blocking; do
		f="$OUT/$m.gc.${sched// /}"
		start $m -gc 100ms
		dp -l 5 -Q 20000 >"$f.dp" 2>&1
		stop
		echo "$m gc (server $sched): $(grep -E 'Average Latency|Queries lost' "$f.dp" | tr -s ' ' | tr '\n' ' ')" | tee -a "$OUT/gc.txt"
		grep -E '^/sched|^ticks' "$OUT/$m.out" | tail -4 | tee -a "$OUT/gc.txt"
		grep -E '^gc [0-9]+ ' "$OUT/$m.err" | tail -300 | awk '{split($5,a,"+"); if (a[1]+0>m1) m1=a[1]+0; if (a[3]+0>m3) m3=a[3]+0} END{printf "  gctrace: max STW sweep-term %.3f ms, max STW mark-term %.3f ms (wall clock)\n", m1, m3}' | tee -a "$OUT/gc.txt"
		: >"$OUT/$m.err"
	done
done
uptime | tee -a "$OUT/rate.txt"

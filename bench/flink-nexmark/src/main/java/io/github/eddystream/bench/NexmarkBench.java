package io.github.eddystream.bench;

import java.io.IOException;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.JobListener;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;

/**
 * Runs one Nexmark query as Flink SQL on a local MiniCluster, over a bounded
 * number of events of the reference generator into a blackhole sink, and
 * prints what it measured in the line format of {@code eddy bench nexmark}:
 *
 * <pre>
 * nexmark q5 events=1000000 seconds=9.100 cpu_seconds=15.200 events_per_cpu_second=65789 rss_mb=610 engine=flink
 * nexmark q5 events=1000000 seconds=9.800 cpu_seconds=16.000 events_per_cpu_second=62500 rss_mb=640 checkpoint=10s checkpoints=0 engine=flink
 * </pre>
 *
 * <p>The measurement starts when the job was submitted to the MiniCluster
 * (SQL planning and the cluster's start are left out, as eddy leaves out
 * loading the pipeline file) and ends when the job finished. The CPU time is
 * the whole JVM's: every task, the JobManager, the JIT compiler and the
 * garbage collector. {@code --warmup N} first runs the same query N times in
 * the same JVM, so that the measured run is JIT-compiled code, as in Flink's
 * published figures (measured after a warm-up). Peak RSS is the JVM's
 * (VmHWM), warm-ups included.
 *
 * <p>Arguments: {@code --query q5 --events N [--parallelism P] [--rate R]
 * [--checkpoint 10s --checkpoint-dir DIR] [--warmup N]}.
 */
public final class NexmarkBench {

    private NexmarkBench() {}

    /** The parsed command line. */
    private static final class Options {
        String query;
        long events;
        int parallelism = 1;
        long rate = 10_000_000L;
        Duration checkpoint = Duration.ZERO;
        String checkpointDir;
        int warmup;
    }

    public static void main(String[] args) throws Exception {
        Options o = parse(args);
        for (int i = 0; i < o.warmup; i++) {
            runQuery(o);
        }
        Measured m = runQuery(o);
        System.out.println(m.line(o));
        // The MiniCluster's non-daemon threads may outlive the job.
        System.exit(0);
    }

    /** What one run measured. */
    private static final class Measured {
        double seconds;
        double cpuSeconds;
        long checkpoints;

        String line(Options o) {
            StringBuilder b = new StringBuilder();
            b.append(String.format(Locale.ROOT, "nexmark %s events=%d seconds=%.3f cpu_seconds=%.3f events_per_cpu_second=%.0f rss_mb=%d",
                    o.query, o.events, seconds, cpuSeconds, o.events / cpuSeconds, peakRssMB()));
            if (!o.checkpoint.isZero()) {
                b.append(" checkpoint=").append(formatDuration(o.checkpoint));
                b.append(" checkpoints=").append(checkpoints);
            }
            b.append(" engine=flink");
            return b.toString();
        }
    }

    /**
     * Plans and runs the query once; returns the wall and CPU time from the
     * job's submission to its end, and the checkpoints it completed.
     */
    private static Measured runQuery(Options o) throws Exception {
        CheckpointCounter.reset();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(o.parallelism, configuration(o));
        Measured m = new Measured();
        long[] start = new long[2]; // wall nanos, CPU nanos
        env.registerJobListener(new JobListener() {
            @Override
            public void onJobSubmitted(JobClient client, Throwable t) {
                start[0] = System.nanoTime();
                start[1] = processCpuNanos();
            }

            @Override
            public void onJobExecuted(JobExecutionResult result, Throwable t) {}
        });
        StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
        // The table settings of the reference benchmark (nexmark-flink's conf/config.yaml).
        tEnv.getConfig().set("table.exec.mini-batch.enabled", "true");
        tEnv.getConfig().set("table.exec.mini-batch.allow-latency", "2s");
        tEnv.getConfig().set("table.exec.mini-batch.size", "50000");
        tEnv.getConfig().set("table.optimizer.distinct-agg.split.enabled", "true");

        List<String> statements = new ArrayList<>();
        Map<String, String> vars = Map.of(
                "TPS", Long.toString(o.rate),
                "EVENTS_NUM", Long.toString(o.events),
                "PERSON_PROPORTION", "1",
                "AUCTION_PROPORTION", "3",
                "BID_PROPORTION", "46",
                "NEXMARK_TABLE", "datagen");
        statements.addAll(statements("ddl_gen.sql", vars));
        statements.addAll(statements("ddl_views.sql", vars));
        statements.addAll(statements(o.query + ".sql", vars));
        TableResult last = null;
        for (String s : statements) {
            last = tEnv.executeSql(s);
        }
        if (last == null || last.getJobClient().isEmpty()) {
            throw new IllegalStateException(o.query + ": the last statement started no job");
        }
        last.await();
        m.seconds = (System.nanoTime() - start[0]) / 1e9;
        m.cpuSeconds = (processCpuNanos() - start[1]) / 1e9;
        m.checkpoints = CheckpointCounter.completed();
        return m;
    }

    /** The MiniCluster's configuration: parallelism and, with --checkpoint, checkpoints. */
    private static Configuration configuration(Options o) {
        Configuration conf = new Configuration();
        conf.set(CoreOptions.DEFAULT_PARALLELISM, o.parallelism);
        conf.setString("metrics.reporter.bench.factory.class", CheckpointCounter.Factory.class.getName());
        if (!o.checkpoint.isZero()) {
            conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, o.checkpoint);
            conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
            conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
            conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, Path.of(o.checkpointDir).toUri().toString());
            // As the reference benchmark: the job ends when its input does,
            // without waiting for a final checkpoint.
            conf.set(CheckpointingOptions.ENABLE_CHECKPOINTS_AFTER_TASKS_FINISH, false);
        }
        return conf;
    }

    /**
     * Reads a SQL file of the reference queries from the class path, with
     * its ${VAR}s replaced, as a list of statements (comment lines dropped,
     * split at ';').
     */
    private static List<String> statements(String file, Map<String, String> vars) throws IOException {
        String text;
        try (InputStream in = NexmarkBench.class.getResourceAsStream("/queries/" + file)) {
            if (in == null) {
                throw new IllegalArgumentException("no query file queries/" + file);
            }
            text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
        for (Map.Entry<String, String> v : vars.entrySet()) {
            text = text.replace("${" + v.getKey() + "}", v.getValue());
        }
        StringBuilder sql = new StringBuilder();
        for (String line : text.split("\n")) {
            if (!line.strip().startsWith("--")) {
                sql.append(line).append('\n');
            }
        }
        List<String> out = new ArrayList<>();
        for (String s : sql.toString().split(";")) {
            if (!s.isBlank()) {
                out.add(s.strip());
            }
        }
        return out;
    }

    /** The JVM's CPU time (user and system, every thread) in nanoseconds. */
    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    /** The JVM's peak resident set size (VmHWM) in MiB, or -1 where /proc has none. */
    private static long peakRssMB() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    String kb = line.substring("VmHWM:".length()).replace("kB", "").strip();
                    return Long.parseLong(kb) / 1024;
                }
            }
        } catch (IOException | NumberFormatException e) {
            return -1;
        }
        return -1;
    }

    /** Formats a duration as eddy does in its lines: 10s, 500ms, 2m, 1h. */
    private static String formatDuration(Duration d) {
        if (d.toMillis() % 3_600_000 == 0) {
            return d.toHours() + "h";
        }
        if (d.toMillis() % 60_000 == 0) {
            return d.toMinutes() + "m";
        }
        if (d.toMillis() % 1000 == 0) {
            return d.toSeconds() + "s";
        }
        return d.toMillis() + "ms";
    }

    /** Parses durations as 10s, 500ms, 2m, 1h or 0 (what eddy's --checkpoint takes, in whole units). */
    private static Duration parseDuration(String s) {
        if (s.equals("0")) {
            return Duration.ZERO;
        }
        if (s.endsWith("ms")) {
            return Duration.ofMillis(Long.parseLong(s.substring(0, s.length() - 2)));
        }
        long n = Long.parseLong(s.substring(0, s.length() - 1));
        switch (s.charAt(s.length() - 1)) {
            case 's':
                return Duration.ofSeconds(n);
            case 'm':
                return Duration.ofMinutes(n);
            case 'h':
                return Duration.ofHours(n);
            default:
                throw new IllegalArgumentException("bad duration " + s + ": write 10s, 500ms or 2m");
        }
    }

    private static Options parse(String[] args) {
        Options o = new Options();
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            if (i + 1 >= args.length) {
                throw new IllegalArgumentException(flag + " needs a value");
            }
            String v = args[++i];
            switch (flag) {
                case "--query":
                    o.query = v;
                    break;
                case "--events":
                    o.events = Long.parseLong(v);
                    break;
                case "--parallelism":
                    o.parallelism = Integer.parseInt(v);
                    break;
                case "--rate":
                    o.rate = Long.parseLong(v);
                    break;
                case "--checkpoint":
                    o.checkpoint = parseDuration(v);
                    break;
                case "--checkpoint-dir":
                    o.checkpointDir = v;
                    break;
                case "--warmup":
                    o.warmup = Integer.parseInt(v);
                    break;
                default:
                    throw new IllegalArgumentException("unknown flag " + flag);
            }
        }
        if (o.query == null || o.events <= 0) {
            throw new IllegalArgumentException("usage: --query qN --events N [--parallelism P] [--rate R] [--checkpoint 10s --checkpoint-dir DIR] [--warmup N]");
        }
        if (!o.checkpoint.isZero() && o.checkpointDir == null) {
            throw new IllegalArgumentException("--checkpoint needs --checkpoint-dir");
        }
        return o;
    }
}

package io.github.eddystream.bench;

import java.util.Properties;

import org.apache.flink.metrics.Gauge;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/**
 * A metric reporter that keeps the JobManager's numberOfCompletedCheckpoints
 * gauge of the running job, so that {@link NexmarkBench} can print how many
 * checkpoints a run took (its value is read again when the job's metrics are
 * removed, at its end).
 */
public final class CheckpointCounter implements MetricReporter {

    private static final String METRIC = "numberOfCompletedCheckpoints";

    private static volatile Gauge<?> gauge;
    private static volatile long last;

    /** Forgets the previous job's count; call before the next job starts. */
    static void reset() {
        gauge = null;
        last = 0;
    }

    /** The checkpoints the job completed, as of its end or now. */
    static long completed() {
        Gauge<?> g = gauge;
        return g != null ? value(g) : last;
    }

    private static long value(Gauge<?> g) {
        Object v = g.getValue();
        return v instanceof Number ? ((Number) v).longValue() : 0;
    }

    @Override
    public void open(MetricConfig config) {}

    @Override
    public void close() {}

    @Override
    public void notifyOfAddedMetric(Metric metric, String name, MetricGroup group) {
        if (METRIC.equals(name) && metric instanceof Gauge) {
            gauge = (Gauge<?>) metric;
        }
    }

    @Override
    public void notifyOfRemovedMetric(Metric metric, String name, MetricGroup group) {
        if (metric == gauge) {
            last = value(gauge);
            gauge = null;
        }
    }

    /** Creates the reporter (metrics.reporter.NAME.factory.class). */
    public static final class Factory implements MetricReporterFactory {
        @Override
        public MetricReporter createMetricReporter(Properties properties) {
            return new CheckpointCounter();
        }
    }
}

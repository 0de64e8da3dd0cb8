import java.time.Duration;
import java.util.Collection;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.common.Node;

/**
 * Readiness probe used by deploy/local/kafka.sh: exits 0 once the broker at
 * args[0] answers a real metadata round trip (DescribeCluster reports at least
 * one broker and an active controller, and ListTopics succeeds), 1 if that does
 * not happen within args[1] seconds (default 10).
 */
public final class KafkaReady {
    public static void main(String[] args) {
        if (args.length < 1) {
            System.err.println("usage: KafkaReady <bootstrap-servers> [timeout-seconds]");
            System.exit(2);
        }
        String bootstrap = args[0];
        long timeoutMs = TimeUnit.SECONDS.toMillis(args.length > 1 ? Long.parseLong(args[1]) : 10);
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);

        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.CLIENT_ID_CONFIG, "switchyard-local-ready");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(Math.max(timeoutMs, 3000)));
        props.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        props.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        props.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, "100");

        String last = "no attempt made";
        Admin admin = Admin.create(props);
        try {
            while (System.nanoTime() < deadline) {
                long left = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
                try {
                    DescribeClusterResult cluster = admin.describeCluster();
                    Collection<Node> nodes = cluster.nodes().get(left, TimeUnit.MILLISECONDS);
                    Node controller = cluster.controller().get(left, TimeUnit.MILLISECONDS);
                    String clusterId = cluster.clusterId().get(left, TimeUnit.MILLISECONDS);
                    int topics = admin.listTopics().names().get(left, TimeUnit.MILLISECONDS).size();
                    if (!nodes.isEmpty() && controller != null && !controller.isEmpty()) {
                        System.out.printf("kafka ready: cluster=%s brokers=%d controller=%d topics=%d%n",
                                clusterId, nodes.size(), controller.id(), topics);
                        admin.close(Duration.ofSeconds(2));
                        System.exit(0);
                    }
                    last = "metadata has brokers=" + nodes.size() + " controller=" + controller;
                } catch (Exception e) {
                    Throwable cause = e.getCause() != null ? e.getCause() : e;
                    last = cause.getClass().getSimpleName() + ": " + cause.getMessage();
                }
                try {
                    Thread.sleep(250);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        } finally {
            admin.close(Duration.ofSeconds(2));
        }
        System.err.println("kafka not ready at " + bootstrap + ": " + last);
        System.exit(1);
    }
}

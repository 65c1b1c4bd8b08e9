// Drives the unmodified Kafka Java client against a broker: admin create/describe,
// an idempotent lz4 producer with acks=all, and an assign()-based consumer that reads
// everything back and checks keys, values, headers, order and offsetsForTimes.
// Run with the kafka-clients jar on the classpath:
//   java -cp '.cache/jvm/kafka-4/*' jvm/ClientCheck.java <bootstrap> <topic> <records> [client.properties]
// The optional properties file holds client settings (security.protocol, sasl.jaas.config, ...).
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.*;

public class ClientCheck {
    static void check(boolean ok, String what) {
        if (!ok) { System.out.println("FAIL " + what); System.exit(1); }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int n = Integer.parseInt(args[2]);
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        if (args.length > 3) {
            try (java.io.FileReader r = new java.io.FileReader(args[3])) { common.load(r); }
        }
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            String clusterId = admin.describeCluster().clusterId().get();
            check(clusterId != null && !clusterId.isEmpty(), "describeCluster cluster id");
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            check(d.partitions().size() == 3, "3 partitions described");
        }
        long base = System.currentTimeMillis() - 60_000;
        Properties pp = new Properties();
        pp.putAll(common);
        pp.put("enable.idempotence", "true");
        pp.put("acks", "all");
        pp.put("compression.type", "lz4");
        pp.put("linger.ms", "5");
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (Producer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, i % 3, base + i, "k" + i, "v" + i);
                r.headers().add("i", Integer.toString(i).getBytes());
                sent.add(p.send(r));
            }
            p.flush();
            for (Future<RecordMetadata> f : sent) f.get();
        }
        Properties cp = new Properties();
        cp.putAll(common);
        cp.put("enable.auto.commit", "false");
        List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1), new TopicPartition(topic, 2));
        int got = 0;
        try (Consumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<Integer, Integer> last = new HashMap<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (got < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    int i = Integer.parseInt(r.key().substring(1));
                    check(r.value().equals("v" + i), "value of record " + i);
                    check(r.partition() == i % 3, "partition of record " + i);
                    check(r.timestamp() == base + i, "timestamp of record " + i);
                    Header h = r.headers().lastHeader("i");
                    check(h != null && new String(h.value()).equals(Integer.toString(i)), "header of record " + i);
                    check(last.getOrDefault(r.partition(), -1) < i, "order in partition " + r.partition());
                    last.put(r.partition(), i);
                    got++;
                }
            }
            check(got == n, "consumed " + got + " of " + n);
            Map<TopicPartition, OffsetAndTimestamp> byTime = c.offsetsForTimes(Map.of(tps.get(0), base + 30));
            OffsetAndTimestamp ot = byTime.get(tps.get(0));
            check(ot != null && ot.timestamp() == base + 30 && ot.offset() == 10, "offsetsForTimes " + ot);
            Map<TopicPartition, Long> ends = c.endOffsets(tps);
            long total = ends.values().stream().mapToLong(Long::longValue).sum();
            check(total == n, "end offsets sum " + total);
        }
        System.out.println("OK " + got);
    }
}

// Drives the unmodified Kafka Java client's transactions against a broker (KIP-98):
//   1. committed and aborted transactions across 3 partitions: a read_committed consumer
//      sees exactly the committed records, a read_uncommitted one sees both, and the
//      read_committed end offsets (the LSO) equal the log end once all are decided;
//   2. consume-transform-produce: sendOffsetsToTransaction with a consumer group, so the
//      group's committed offsets appear only with the commit (and not after an abort);
//   3. zombie fencing: a second producer with the same transactional.id fences the first,
//      whose next send/commit fails with ProducerFencedException (or InvalidProducerEpoch),
//      and the zombie's open transaction is aborted;
//   4. transaction timeout: a transaction left open past transaction.timeout.ms is aborted
//      by the coordinator, and read_committed consumers move past it.
// Prints "OK <committed records>" on success, "FAIL <what>" and exits 1 otherwise.
// Run with the kafka-clients jar on the classpath:
//   java -cp '.cache/jvm/kafka-4/*' jvm/TxnCheck.java <bootstrap> <topic prefix> <records>
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.*;

public class TxnCheck {
    static void check(boolean ok, String what) {
        if (!ok) { System.out.println("FAIL " + what); System.exit(1); }
    }

    static Properties base(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    static KafkaProducer<String, String> producer(String bootstrap, String txnId, int timeoutMs) {
        Properties p = base(bootstrap);
        p.put("transactional.id", txnId);
        p.put("transaction.timeout.ms", Integer.toString(timeoutMs));
        p.put("acks", "all");
        p.put("linger.ms", "5");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String isolation, String group) {
        Properties p = base(bootstrap);
        p.put("isolation.level", isolation);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        if (group != null) p.put("group.id", group);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static List<ConsumerRecord<String, String>> readAll(String bootstrap, String isolation, List<TopicPartition> tps, int expect, long timeoutMs) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(bootstrap, isolation, null)) {
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(300))) out.add(r);
                if (expect >= 0 && out.size() >= expect) {
                    // one more poll to catch records that should not be there
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) out.add(r);
                    break;
                }
            }
        }
        return out;
    }

    static List<TopicPartition> parts(String topic, int n) {
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < n; i++) tps.add(new TopicPartition(topic, i));
        return tps;
    }

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            System.out.println("FAIL " + e);
            e.printStackTrace(System.out);
            System.exit(1);
        }
        System.exit(0);
    }

    static void run(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        int n = Integer.parseInt(args[2]);
        String data = prefix + "-data", input = prefix + "-in", output = prefix + "-out", slow = prefix + "-slow";
        try (Admin admin = Admin.create(base(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(data, 3, (short) -1), new NewTopic(input, 2, (short) -1),
                    new NewTopic(output, 2, (short) -1), new NewTopic(slow, 1, (short) -1))).all().get();
        }

        // 1. commit and abort
        int committed = 0;
        try (KafkaProducer<String, String> p = producer(bootstrap, prefix + "-t1", 60000)) {
            p.initTransactions();
            for (int t = 0; t < 6; t++) {
                p.beginTransaction();
                for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(data, i % 3, "t" + t + "-" + i, t % 2 == 0 ? "commit" : "abort"));
                p.flush();  // abortTransaction drops what was not sent yet
                if (t % 2 == 0) { p.commitTransaction(); committed += n; } else p.abortTransaction();
            }
        }
        List<TopicPartition> dataTps = parts(data, 3);
        List<ConsumerRecord<String, String>> rc = readAll(bootstrap, "read_committed", dataTps, committed, 30000);
        check(rc.size() == committed, "read_committed saw " + rc.size() + " records, expected " + committed);
        for (ConsumerRecord<String, String> r : rc) check(r.value().equals("commit"), "read_committed saw aborted record " + r.key());
        Set<String> keys = new HashSet<>();
        for (ConsumerRecord<String, String> r : rc) check(keys.add(r.key()), "duplicate " + r.key());
        List<ConsumerRecord<String, String>> ru = readAll(bootstrap, "read_uncommitted", dataTps, 6 * n, 30000);
        check(ru.size() == 6 * n, "read_uncommitted saw " + ru.size() + " of " + 6 * n);
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "read_committed", null)) {
            Map<TopicPartition, Long> lso = c.endOffsets(dataTps);
            long sum = lso.values().stream().mapToLong(Long::longValue).sum();
            // 6 transactions x (n data records) + one marker per partition per transaction
            check(sum == 6L * n + 6L * 3, "read_committed end offsets sum " + sum);
        }

        // 2. consume-transform-produce with the offsets in the transaction
        try (KafkaProducer<String, String> p = producer(bootstrap, prefix + "-in-feed", 60000)) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < n; i++) p.send(new ProducerRecord<>(input, i % 2, "in-" + i, "x" + i));
            p.commitTransaction();
        }
        String group = prefix + "-copier";
        try (KafkaConsumer<String, String> c = consumer(bootstrap, "read_committed", group);
             KafkaProducer<String, String> p = producer(bootstrap, prefix + "-copier", 60000)) {
            p.initTransactions();
            c.assign(parts(input, 2));
            int copied = 0, round = 0;
            long deadline = System.currentTimeMillis() + 60000;
            while (copied < n && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(300));
                if (recs.isEmpty()) continue;
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    p.send(new ProducerRecord<>(output, r.partition(), r.key(), r.value().toUpperCase()));
                }
                // the consumer's position (past any transaction marker), as Kafka's
                // TransactionalMessageCopier commits it
                for (TopicPartition tp : recs.partitions()) offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                if (round++ == 0) {
                    p.abortTransaction();  // the first batch is aborted: no output, no offsets
                    c.seekToBeginning(parts(input, 2));  // nothing committed yet: replay it
                    continue;
                }
                p.commitTransaction();
                copied += recs.count();
            }
            check(copied == n, "copied " + copied + " of " + n);
        }
        try (Admin admin = Admin.create(base(bootstrap))) {
            Map<TopicPartition, OffsetAndMetadata> got = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            try (KafkaConsumer<String, String> c = consumer(bootstrap, "read_committed", null)) {
                Map<TopicPartition, Long> ends = c.endOffsets(parts(input, 2));
                for (TopicPartition tp : parts(input, 2)) {
                    OffsetAndMetadata om = got.get(tp);
                    check(om != null && om.offset() == ends.get(tp), "group offset of " + tp + " = " + om + ", end " + ends.get(tp));
                }
            }
        }
        List<ConsumerRecord<String, String>> out = readAll(bootstrap, "read_committed", parts(output, 2), n, 30000);
        check(out.size() == n, "output holds " + out.size() + " of " + n);
        Set<String> outKeys = new HashSet<>();
        for (ConsumerRecord<String, String> r : out) check(outKeys.add(r.key()), "duplicate output " + r.key());

        // 3. zombie fencing
        KafkaProducer<String, String> zombie = producer(bootstrap, prefix + "-fence", 60000);
        zombie.initTransactions();
        zombie.beginTransaction();
        zombie.send(new ProducerRecord<>(data, 0, "zombie", "abort")).get();
        try (KafkaProducer<String, String> fresh = producer(bootstrap, prefix + "-fence", 60000)) {
            fresh.initTransactions();  // aborts the zombie's transaction, bumps the epoch
            fresh.beginTransaction();
            fresh.send(new ProducerRecord<>(data, 0, "fresh", "commit"));
            fresh.commitTransaction();
            committed += 1;
            boolean fenced = false;
            try {
                zombie.send(new ProducerRecord<>(data, 0, "zombie2", "abort")).get();
                zombie.commitTransaction();
            } catch (ProducerFencedException | InvalidProducerEpochException e) {
                fenced = true;
            } catch (ExecutionException e) {
                fenced = e.getCause() instanceof ProducerFencedException || e.getCause() instanceof InvalidProducerEpochException;
            } catch (KafkaException e) {
                fenced = e.getCause() instanceof ProducerFencedException || e.getCause() instanceof InvalidProducerEpochException
                        || e instanceof ProducerFencedException;
            }
            check(fenced, "the zombie producer was not fenced");
        } finally {
            try { zombie.close(Duration.ofSeconds(1)); } catch (Exception ignored) { }
        }

        // 4. the coordinator aborts a transaction that outlives its timeout
        KafkaProducer<String, String> hang = producer(bootstrap, prefix + "-hang", 3000);
        hang.initTransactions();
        hang.beginTransaction();
        hang.send(new ProducerRecord<>(slow, 0, "hung", "abort")).get();
        try (KafkaProducer<String, String> later = producer(bootstrap, prefix + "-after-hang", 60000)) {
            later.initTransactions();
            later.beginTransaction();
            later.send(new ProducerRecord<>(slow, 0, "after", "commit"));
            later.commitTransaction();
        }
        List<ConsumerRecord<String, String>> slowRead = readAll(bootstrap, "read_committed", parts(slow, 1), 1, 60000);
        check(slowRead.size() == 1 && slowRead.get(0).key().equals("after"),
              "after the timeout read_committed saw " + slowRead.size() + " records");
        try { hang.close(Duration.ofSeconds(1)); } catch (Exception ignored) { }

        rc = readAll(bootstrap, "read_committed", dataTps, committed, 30000);
        check(rc.size() == committed, "finally read_committed saw " + rc.size() + " of " + committed);
        System.out.println("OK " + committed);
    }
}

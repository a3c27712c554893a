// Work is the JVM program of trueprof's tests, one program for all of them,
// with two workloads:
//
//   compute  rounds of sorting (Arrays.sort), word counting (HashMap.merge)
//            and string building (StringBuilder): code the JIT compiles
//            early, so most samples land in JIT-compiled methods that only
//            the perf map names (the corpus, the late JIT names test);
//   alloc    allocation: direct buffers, outside the heap, fault in fresh
//            pages as they are filled, and small objects fill the young
//            generation, collected over and over (the loss test).
//
// AMOUNT is a number of rounds (the same work every run: two instances
// recorded at once by two tools do the same) or, with an "s" suffix, a
// number of seconds. testutil.JVMProgram builds and runs it as
//
//	javac -d DIR Work.java
//	java -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit \
//	     -XX:+PreserveFramePointer -cp DIR Work compute|alloc AMOUNT
//
// The JVM writes /tmp/perf-PID.map only as it exits.
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

public class Work {
    static long sortRound(Random rnd, int n) {
        int[] a = new int[n];
        for (int i = 0; i < n; i++) {
            a[i] = rnd.nextInt();
        }
        Arrays.sort(a);
        return a[n / 2];
    }

    static long countWords(Random rnd, int n) {
        Map<String, Integer> counts = new HashMap<>();
        for (int i = 0; i < n; i++) {
            counts.merge("w" + rnd.nextInt(5000), 1, Integer::sum);
        }
        return counts.size();
    }

    static long build(int n) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < n; i++) {
            sb.append(i % 97).append(',');
        }
        return sb.toString().hashCode();
    }

    static long computeRound(Random rnd) {
        return sortRound(rnd, 200_000) + countWords(rnd, 200_000) + build(100_000);
    }

    static long fill(ByteBuffer b, byte v) {
        for (int i = 0; i < b.capacity(); i += 4096) {
            b.put(i, v);
        }
        return b.get(b.capacity() - 1);
    }

    static int objects(int n) {
        Map<String, List<Integer>> m = new HashMap<>();
        for (int i = 0; i < n; i++) {
            m.computeIfAbsent("k" + (i % 997), k -> new ArrayList<>()).add(i);
        }
        return m.size();
    }

    static long allocRound() {
        long sum = 0;
        for (int j = 0; j < 4; j++) {
            sum += fill(ByteBuffer.allocateDirect(1 << 20), (byte) j);
        }
        return sum + objects(20000);
    }

    static void usage(String why) {
        System.err.println("Work: " + why + "\nusage: Work compute|alloc ROUNDS|SECONDSs");
        System.exit(2);
    }

    public static void main(String[] args) {
        if (args.length != 2) {
            usage("want 2 arguments, have " + args.length);
        }
        boolean alloc = false;
        switch (args[0]) {
            case "compute": break;
            case "alloc": alloc = true; break;
            default: usage("unknown workload " + args[0]);
        }
        long rounds = Long.MAX_VALUE;
        long end = Long.MAX_VALUE;
        try {
            if (args[1].endsWith("s")) {
                double seconds = Double.parseDouble(args[1].substring(0, args[1].length() - 1));
                end = System.nanoTime() + (long) (seconds * 1e9);
            } else {
                rounds = Long.parseLong(args[1]);
            }
        } catch (NumberFormatException e) {
            usage("bad amount " + args[1]);
        }
        Random rnd = new Random(42);
        long sum = 0;
        long r = 0;
        for (; r < rounds && System.nanoTime() < end; r++) {
            sum += alloc ? allocRound() : computeRound(rnd);
        }
        System.out.println("rounds " + r + " sum " + sum);
    }
}

// Work is the JVM program of trueprof's late JIT map test: a few seconds
// of sorting, HashMap.merge and string building, so that the JIT compiles
// the JDK's DualPivotQuicksort, HashMap and StringBuilder methods and the
// program's own loops. Run it as
//
//	javac -d DIR Work.java
//	java -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit \
//	     -XX:+PreserveFramePointer -cp DIR Work [SECONDS]
//
// The JVM writes /tmp/perf-PID.map only as it exits.
import java.util.Arrays;
import java.util.HashMap;
import java.util.Random;

public class Work {
    static long sink;

    static void sortArrays(Random rnd) {
        int[] a = new int[100_000];
        for (int i = 0; i < a.length; i++) {
            a[i] = rnd.nextInt();
        }
        Arrays.sort(a);
        sink += a[a.length / 2];
    }

    static void countWords(Random rnd) {
        HashMap<String, Integer> counts = new HashMap<>();
        for (int i = 0; i < 50_000; i++) {
            counts.merge("w" + rnd.nextInt(5_000), 1, Integer::sum);
        }
        sink += counts.size();
    }

    static void buildStrings(Random rnd) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < 20_000; i++) {
            sb.append(rnd.nextInt(1000)).append(',');
        }
        sink += sb.toString().hashCode();
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        Random rnd = new Random(42);
        while (System.nanoTime() < end) {
            sortArrays(rnd);
            countWords(rnd);
            buildStrings(rnd);
        }
        System.out.println("sink " + sink);
    }
}

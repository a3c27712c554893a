// Work is the corpus's JVM program: ROUNDS (its argument) rounds of sorting, hashing and
// string building, the kind of code the JIT compiles early, so most of the
// samples land in JIT-compiled methods that only the perf map names.
import java.util.Arrays;
import java.util.HashMap;
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

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 20;
        Random rnd = new Random(42);
        long sum = 0;
        for (int r = 0; r < rounds; r++) {
            sum += sortRound(rnd, 200_000);
            sum += countWords(rnd, 200_000);
            sum += build(100_000);
        }
        System.out.println("sum " + sum);
    }
}

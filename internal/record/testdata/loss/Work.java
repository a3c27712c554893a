// Work allocates for about two seconds (the loss test records it): the
// young generation fills and is collected over and over, and direct
// buffers, outside the heap, fault in fresh pages as they are filled.
//
//	javac -d DIR Work.java && java -XX:+PreserveFramePointer -cp DIR Work [seconds]
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public class Work {
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

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 2;
        long end = System.nanoTime() + (long) (seconds * 1e9);
        long sum = 0;
        int rounds = 0;
        while (System.nanoTime() < end) {
            for (int j = 0; j < 4; j++) {
                sum += fill(ByteBuffer.allocateDirect(1 << 20), (byte) j);
            }
            sum += objects(20000);
            rounds++;
        }
        System.out.println("rounds " + rounds + " sum " + sum);
    }
}

// Fixture for symbolize tests, built by the tests with
//   g++ -O1 -g -o progxx prog.cc
#include <cstdio>
#include <cstdlib>

namespace geo {
struct Shape {
	virtual ~Shape() {}
	virtual double size() const = 0;
};
struct Square : Shape {
	double side;
	explicit Square(double s) : side(s) {}
	__attribute__((noinline)) double size() const override { return side * side; }
};
__attribute__((noinline)) long area(long w, long h) { return w * h + (w ^ h); }
__attribute__((noinline)) double area(double r) { return 3.14159 * r * r; }
template <typename T> __attribute__((noinline)) T twice(T v) { return v + v; }
} // namespace geo

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 7;
	geo::Square sq(n);
	const geo::Shape *s = &sq;
	std::printf("%ld %f %ld %f %f\n", geo::area(n, n + 1), geo::area(double(n)),
		    geo::twice<long>(n), geo::twice<double>(n), s->size());
	return 0;
}

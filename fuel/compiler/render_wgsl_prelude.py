"""The WGSL functions rendered shaders call: NumPy's semantics where WGSL's built-ins differ or
leave a choice to the driver (``PRELUDE``), and the float16 rounding (``FLOAT16_ROUND``)."""

from __future__ import annotations

PRELUDE = """
fn fuel_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
// asin, acos, atan: Cephes' single-precision polynomials (drivers' built-ins, lavapipe's
// among them, are off by up to 4e-4).
fn fuel_asin(x: f32) -> f32 {
  let a = abs(x);
  if (a > 1.0) { return bitcast<f32>(0x7fc00000u); }
  var z: f32; var s: f32;
  if (a > 0.5) { z = 0.5 * (1.0 - a); s = sqrt(z); } else { z = a * a; s = a; }
  var r = ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z
    + 7.4953002686e-2) * z + 1.6666752422e-1) * z * s + s;
  if (a > 0.5) { r = 1.5707963267948966 - 2.0 * r; }
  return select(r, -r, x < 0.0);
}
fn fuel_acos(x: f32) -> f32 {
  if (x < -0.5) { return 3.141592653589793 - 2.0 * fuel_asin(sqrt(0.5 * (1.0 + x))); }
  if (x > 0.5) { return 2.0 * fuel_asin(sqrt(0.5 * (1.0 - x))); }
  return 1.5707963267948966 - fuel_asin(x);
}
fn fuel_atan(x: f32) -> f32 {
  var a = abs(x);
  var y = 0.0;
  if (a > 2.414213562373095) { y = 1.5707963267948966; a = -1.0 / a; }
  else if (a > 0.4142135623730950) { y = 0.7853981633974483; a = (a - 1.0) / (a + 1.0); }
  let z = a * a;
  y = y + (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z
    - 3.33329491539e-1) * z * a + a;
  return select(y, -y, x < 0.0);
}
fn fuel_expm1(x: f32) -> f32 {
  let u = exp(x);
  if (u == 1.0) { return x; }
  let m = u - 1.0;
  if (m == -1.0) { return -1.0; }
  if (abs(x) > 0.5) { return m; }
  return m * x / log(u);
}
fn fuel_log1p(x: f32) -> f32 {
  let u = 1.0 + x;
  if (u == 1.0) { return x; }
  if (abs(x) > 0.5) { return log(u); }
  return log(u) * x / (u - 1.0);
}
fn fuel_erf(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5) {
    let s = x * x;
    return x * 1.1283791670955126 * (1.0 + s * (-0.3333333333333333 + s * (0.1 + s * (
      -0.023809523809523808 + s * (0.004629629629629629 + s * -0.0007575757575757576)))));
  }
  let t = 1.0 / (1.0 + 0.5 * a);
  let c = t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
    + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
    + t * (-0.82215223 + t * 0.17087277)))))))));
  return sign(x) * (1.0 - c);
}
fn fuel_pow(x: f32, y: f32) -> f32 {
  if (y == 0.0) { return 1.0; }
  if (fuel_isnan(x) || fuel_isnan(y)) { return bitcast<f32>(0x7fc00000u); }
  if (x == 0.0) { if (y > 0.0) { return 0.0; } return bitcast<f32>(0x7f800000u); }
  if (x < 0.0) {
    if (floor(y) != y) { return bitcast<f32>(0x7fc00000u); }
    let p = exp2(y * log2(-x));
    if (abs(y) < 16777216.0 && (i32(y) & 1) == 1) { return -p; }
    return p;
  }
  return exp2(y * log2(x));
}
fn fuel_remainder_f32(x: f32, y: f32) -> f32 {
  var r = x % y;
  if (r != 0.0 && ((r < 0.0) != (y < 0.0))) { r = r + y; }
  return r;
}
fn fuel_pow_i32(x: i32, y: i32) -> i32 {
  if (y < 0) { if (x == 1) { return 1; } if (x == -1) { return select(1, -1, (y & 1) == 1); }
               return 0; }
  var result = 1; var base = x; var e = y;
  loop { if (e == 0) { break; } if ((e & 1) == 1) { result = result * base; }
         base = base * base; e = e >> 1u; }
  return result;
}
fn fuel_pow_u32(x: u32, y: u32) -> u32 {
  var result = 1u; var base = x; var e = y;
  loop { if (e == 0u) { break; } if ((e & 1u) == 1u) { result = result * base; }
         base = base * base; e = e >> 1u; }
  return result;
}
"""

# float16 values are computed in f32 and rounded here, to the nearest float16 with ties to
# even, as NumPy rounds (WGSL leaves an f32 -> f16 conversion's rounding to the driver).
# The result is an f32 holding a float16 value exactly, so storing it as f16 is exact.
FLOAT16_ROUND = """
fn fuel_f16_round(x: f32) -> f32 {
  let bits = bitcast<u32>(x);
  let magnitude = bits & 0x7fffffffu;
  let sign = bits & 0x80000000u;
  if (magnitude >= 0x7f800000u) { return x; }  // NaN and the infinities
  if (magnitude >= 0x477ff000u) { return bitcast<f32>(sign | 0x7f800000u); }  // from 65520
  if (magnitude < 0x38800000u) {  // below 2**-14: float16's subnormals, steps of 2**-24
    return round(x * 16777216.0) * 5.9604644775390625e-8;
  }
  let kept = magnitude + 0xfffu + ((magnitude >> 13u) & 1u);  // 13 bits dropped, to even
  return bitcast<f32>(sign | (kept & 0xffffe000u));
}
"""

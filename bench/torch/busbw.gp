# bench/torch/run.sh: busbw of torch's dist.all_reduce per backend, and of the C library
# (its blocking rr_all_reduce on the same group, in the same ranks) underneath, from busbw_w2.dat and busbw_w4.dat.
set terminal pngcairo size 1400,560 font ',10' noenhanced
set output 'busbw.png'
set logscale x 2
set logscale y 10
set xlabel 'message size (bytes)'
set ylabel 'busbw (GB/s)'
set key top left font ',9'
set grid
set format x '%.0b%B'
set format y '%g'
set multiplot layout 1,2
do for [w in "2 4"] {
  set title sprintf('torch dist.all_reduce, float32 sum, world %s (one host)', w)
  f = sprintf('busbw_w%s.dat', w)
  plot f using 1:2 with linespoints lw 2 lc rgb '#2ca02c' pt 5 ps 0.7 title 'torch gloo', \
       f using 1:3 with linespoints lw 3 lc rgb '#1f77b4' pt 9 ps 0.7 title 'torch ringreduce (shm)', \
       f using 1:4 with linespoints lw 3 lc rgb '#d62728' pt 8 ps 0.7 title 'torch ringreduce (tcp)', \
       f using 1:5 with linespoints lw 1.5 dt 2 lc rgb '#1f77b4' pt 1 ps 0.7 title 'C rr_all_reduce, same ranks (shm)', \
       f using 1:6 with linespoints lw 1.5 dt 2 lc rgb '#d62728' pt 2 ps 0.7 title 'C rr_all_reduce, same ranks (tcp)'
}
unset multiplot

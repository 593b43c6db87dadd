set terminal pngcairo size 1400,560 font ',10' noenhanced
set output 'busbw.png'
set logscale x 2
set xlabel 'message size (bytes)'
set ylabel 'busbw (GB/s)'
set key top left font ',9'
set grid
set format x '%.0b%B'
set multiplot layout 1,2
set title 'all-reduce float32 sum, np=2 (one host)'
plot 'busbw_np2.dat' using 1:2 with linespoints lw 1.5 pt 1 ps 0.7 title 'mpi-tcp', \
     'busbw_np2.dat' using 1:3 with linespoints lw 1.5 pt 2 ps 0.7 title 'mpi-tcp-tuned', \
     'busbw_np2.dat' using 1:4 with linespoints lw 1.5 pt 3 ps 0.7 title 'mpi-shm', \
     'busbw_np2.dat' using 1:5 with linespoints lw 1.5 pt 4 ps 0.7 title 'mpi-shm-tuned', \
     'busbw_np2.dat' using 1:6 with linespoints lw 1.5 pt 5 ps 0.7 title 'gloo-ring', \
     'busbw_np2.dat' using 1:7 with linespoints lw 1.5 pt 6 ps 0.7 title 'gloo-ring_chunked', \
     'busbw_np2.dat' using 1:8 with linespoints lw 2 dt 2 lc rgb 'black' pt 7 ps 0.7 title 'socket-ring', \
     'busbw_np2.dat' using 1:9 with linespoints lw 2 dt 3 lc rgb 'black' pt 8 ps 0.7 title 'socket-ring-mt', \
     'busbw_np2.dat' using 1:10 with linespoints lw 3 lc rgb '#d62728' pt 9 ps 0.7 title 'rr-tcp', \
     'busbw_np2.dat' using 1:11 with linespoints lw 3 lc rgb '#1f77b4' pt 10 ps 0.7 title 'rr-shm'
set title 'all-reduce float32 sum, np=4 (one host)'
plot 'busbw_np4.dat' using 1:2 with linespoints lw 1.5 pt 1 ps 0.7 title 'mpi-tcp', \
     'busbw_np4.dat' using 1:3 with linespoints lw 1.5 pt 2 ps 0.7 title 'mpi-tcp-tuned', \
     'busbw_np4.dat' using 1:4 with linespoints lw 1.5 pt 3 ps 0.7 title 'mpi-shm', \
     'busbw_np4.dat' using 1:5 with linespoints lw 1.5 pt 4 ps 0.7 title 'mpi-shm-tuned', \
     'busbw_np4.dat' using 1:6 with linespoints lw 1.5 pt 5 ps 0.7 title 'gloo-ring', \
     'busbw_np4.dat' using 1:7 with linespoints lw 1.5 pt 6 ps 0.7 title 'gloo-ring_chunked', \
     'busbw_np4.dat' using 1:8 with linespoints lw 2 dt 2 lc rgb 'black' pt 7 ps 0.7 title 'socket-ring', \
     'busbw_np4.dat' using 1:9 with linespoints lw 2 dt 3 lc rgb 'black' pt 8 ps 0.7 title 'socket-ring-mt', \
     'busbw_np4.dat' using 1:10 with linespoints lw 3 lc rgb '#d62728' pt 9 ps 0.7 title 'rr-tcp', \
     'busbw_np4.dat' using 1:11 with linespoints lw 3 lc rgb '#1f77b4' pt 10 ps 0.7 title 'rr-shm'
unset multiplot
